"""The driver JVM maps the class archive that ``scripts/setup.sh`` recorded (headwater.spark.class_archive)."""

from __future__ import annotations

import pytest

from headwater.spark import class_archive

pytestmark = pytest.mark.spark


def test_the_driver_maps_the_class_archive_setup_recorded(spark):
    path = class_archive.archive_path()
    assert path is not None and path.is_file(), \
        "scripts/setup.sh records it (python -m headwater.cli.class_archive); Spark starts ~2x slower without"
    jvm = spark.sparkContext._jvm
    diagnostics = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    assert diagnostics.getVMOption("SharedArchiveFile").getValue() == str(path)
    assert "sharing" in jvm.java.lang.System.getProperty("java.vm.info")
