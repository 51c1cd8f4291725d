"""The Spark home Headwater starts Spark from (headwater.spark.home): the wheel's programs and jars, no pyspark.zip."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from headwater.spark import home as spark_home_module
from headwater.spark.home import JAR, spark_home, wheel_home


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(spark_home_module, "HOMES", tmp_path / "share")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    # compiling takes a JVM: the installation's own home is checked with a real one (test_spark_home_on_spark)
    monkeypatch.setattr(spark_home_module, "build_jar", lambda jars, target: target.write_bytes(b"") or True)
    return tmp_path / "share"


def test_the_home_links_the_wheel_s_programs_and_jars_and_has_no_pyspark_zip(homes: Path) -> None:
    home = spark_home()
    assert home.parent == homes
    wheel = wheel_home()
    assert (wheel / "python" / "lib" / "pyspark.zip").is_file()  # what the wheel's own home would put on PYTHONPATH
    assert (home / "bin").resolve() == wheel / "bin" and (home / "sbin").resolve() == wheel / "sbin"
    assert {p.name for p in (home / "jars").iterdir()} == {p.name for p in (wheel / "jars").iterdir()} | {JAR}
    assert all((home / "jars" / p.name).resolve() == p for p in (wheel / "jars").iterdir())
    assert (home / "bin" / "spark-class").is_file() and any((home / "jars").glob("spark-core_*.jar"))
    assert not (home / "python").exists()
    assert spark_home() == home  # made once


def test_a_spark_home_naming_another_installation_is_the_user_s_choice(homes: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "spark-4"
    mine.mkdir()
    monkeypatch.setenv("SPARK_HOME", str(mine))
    assert spark_home() == mine
    monkeypatch.setenv("SPARK_HOME", str(wheel_home()))  # what PySpark itself would use: not a choice of Spark
    assert spark_home().parent == homes
    monkeypatch.setenv("SPARK_HOME", str(spark_home()))  # inherited from a process that started Spark from it
    assert spark_home().parent == homes


def test_an_installation_that_cannot_be_written_starts_spark_from_the_wheel(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(spark_home_module, "HOMES", blocked / "share")  # cannot be a directory, even for root
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert spark_home() == wheel_home()


def test_processes_making_the_home_at_once_all_get_the_same_complete_one(homes: Path) -> None:
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(spark_home())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and (got[0] / "jars").is_dir()
    assert [p.name for p in homes.iterdir()] == [got[0].name]  # no scratch directory left behind


def test_the_jar_is_left_out_with_a_warning_where_it_cannot_be_compiled(tmp_path: Path, caplog,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from headwater.spark import class_archive

    jars, target = wheel_home() / "jars", tmp_path / JAR
    broken = tmp_path / "Broken.java"
    broken.write_text("package headwater.spark; public class Broken { void f() { undefined(); } }")
    monkeypatch.setattr(spark_home_module, "JAVA_SOURCES", (broken,))
    assert not spark_home_module.build_jar(jars, target) and not target.exists()
    assert "did not compile" in caplog.text and "Broken" in caplog.text  # the compiler's own message
    monkeypatch.setattr(class_archive, "java_binary", lambda: None)
    assert not spark_home_module.build_jar(jars, target) and not target.exists()
    assert "no Java" in caplog.text
