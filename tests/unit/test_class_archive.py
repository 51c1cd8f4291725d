"""The driver's class archive: which JVM options a driver gets, and what an archive's name says it fits."""

import sys

import pytest

from headwater.spark import class_archive


@pytest.fixture
def archive(tmp_path, monkeypatch):
    path = tmp_path / "spark-driver-0123456789abcdef.jsa"
    monkeypatch.setattr(class_archive, "archive_path", lambda: path)
    monkeypatch.delenv(class_archive.DUMP_ENV, raising=False)
    monkeypatch.delenv(class_archive.OFF_ENV, raising=False)
    return path


def test_a_driver_maps_the_archive_only_when_it_exists(archive):
    assert class_archive.java_options() == ""
    archive.write_bytes(b"archive")
    options = class_archive.java_options().split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-Xlog:cds=off" in options  # a JVM that cannot use it runs without it, and says nothing


def test_the_recording_driver_writes_the_archive_and_off_turns_it_off(archive, monkeypatch):
    archive.write_bytes(b"archive")
    monkeypatch.setenv(class_archive.OFF_ENV, "off")
    assert class_archive.java_options() == ""
    monkeypatch.setenv(class_archive.DUMP_ENV, "/x/new.jsa")
    assert class_archive.java_options().split()[0] == "-XX:ArchiveClassesAtExit=/x/new.jsa"


def test_the_fingerprint_changes_with_the_java_binary_and_any_spark_jar(tmp_path):
    java, jars = tmp_path / "java", tmp_path / "jars"
    jars.mkdir()
    java.write_bytes(b"jvm")
    (jars / "spark-core.jar").write_bytes(b"core")
    first = class_archive.fingerprint(java, jars)
    assert class_archive.fingerprint(java, jars) == first
    (jars / "spark-sql.jar").write_bytes(b"sql")
    second = class_archive.fingerprint(java, jars)
    (jars / "spark-sql.jar").write_bytes(b"sql, upgraded")
    third = class_archive.fingerprint(java, jars)
    java.write_bytes(b"another jvm build")
    assert len({first, second, third, class_archive.fingerprint(java, jars)}) == 4


def test_the_archive_belongs_to_this_installation():
    path = class_archive.archive_path()
    if path is None:
        pytest.skip("no Java here")
    assert path.parent == class_archive.ARCHIVES and path.parent.is_relative_to(sys.prefix)
