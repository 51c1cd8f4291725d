"""Spark's Python processes import the installed pyspark, not ``pyspark.zip`` (headwater.spark.home)."""

from __future__ import annotations

import os

import pytest

from headwater.spark.home import spark_home

pytestmark = pytest.mark.spark


def test_the_python_workers_import_the_installed_pyspark_with_its_bytecode_cache(spark):
    assert os.environ["SPARK_HOME"] == str(spark_home())

    def where_pyspark_is(_: object) -> str:  # defined here: shipped by value, not imported from this test module
        import os

        import pyspark

        return f"{pyspark.__file__}|{os.environ.get('PYTHONPATH', '')}"

    for answer in spark.sparkContext.parallelize(range(2), 2).map(where_pyspark_is).collect():
        module, python_path = answer.split("|", 1)
        assert ".zip" not in module and module.endswith(os.path.join("pyspark", "__init__.py")), answer
        assert "pyspark.zip" in python_path  # Spark still names it, in a home that does not have it


def test_local_files_get_hadoop_s_permissions_without_a_chmod_process(spark, tmp_path):
    """headwater.spark.LocalFileSystem: the permission Hadoop would set, through java.nio (its own way runs chmod)."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == "headwater.spark.LocalFileSystem"
    umask = os.umask(0)
    os.umask(umask)

    def made(name: str):
        path = jvm.org.apache.hadoop.fs.Path(str(tmp_path / name))
        fs.create(path, True).close()  # Hadoop sets 0666 less the umask on each new file
        return path

    made("new")
    assert (tmp_path / "new").stat().st_mode & 0o7777 == 0o666 & ~umask
    for mode in ("640", "755", "000", "777", "1777"):  # the sticky bit through Hadoop's chmod
        path = made(f"file-{mode}")
        fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission(mode))
        assert (tmp_path / f"file-{mode}").stat().st_mode & 0o7777 == int(mode, 8), mode
        assert fs.getFileStatus(path).getPermission().toShort() == int(mode, 8), mode
    fs.mkdirs(jvm.org.apache.hadoop.fs.Path(str(tmp_path / "d")), jvm.org.apache.hadoop.fs.permission.FsPermission("750"))
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o750 & ~umask
