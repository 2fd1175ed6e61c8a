"""The Fast DDS profile every command runs with (config/fastdds.xml, exported by scripts/env.sh):
valid for the installed Fast DDS, fast discovery, and writers that heartbeat every 100 ms (a
sample lost in a burst is re-sent within ~0.1 s, not at the default 3 s heartbeat)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "config" / "fastdds.xml"
NS = {"f": "http://www.eprosima.com"}


def _xsd() -> Path:
    xsd = Path(sys.prefix) / "share" / "fastdds" / "fastdds_profiles.xsd"
    if not xsd.exists():
        pytest.skip("no Fast DDS schema in this environment (a system ROS)")
    return xsd


def _seconds(el) -> float:
    sec = el.find("f:sec", NS)
    ns = el.find("f:nanosec", NS)
    return (int(sec.text) if sec is not None else 0) + (int(ns.text) if ns is not None else 0) / 1e9


def test_the_profile_is_valid_for_the_installed_fast_dds():
    from lxml import etree

    schema = etree.XMLSchema(etree.parse(str(_xsd())))
    assert schema.validate(etree.parse(str(PROFILE))), schema.error_log


def test_default_writers_heartbeat_every_100_ms_and_participants_announce_every_half_second():
    from lxml import etree

    doc = etree.parse(str(PROFILE))
    writers = doc.findall(".//f:data_writer[@is_default_profile='true']", NS)
    assert len(writers) == 1
    assert _seconds(writers[0].find("f:times/f:heartbeat_period", NS)) == pytest.approx(0.1)
    part = doc.find(".//f:participant[@is_default_profile='true']", NS)
    lease = part.find(".//f:discovery_config/f:leaseAnnouncement", NS)
    assert _seconds(lease) == pytest.approx(0.5)


def test_the_environment_exports_the_profile_unless_the_user_set_one():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTDDS_DEFAULT", "FASTRTPS_DEFAULT"))}
    out = subprocess.run(["bash", "-c", f"source {ROOT}/scripts/env.sh >/dev/null 2>&1; echo $FASTDDS_DEFAULT_PROFILES_FILE"],
                         env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    assert out == str(PROFILE)
    mine = subprocess.run(["bash", "-c", f"source {ROOT}/scripts/env.sh >/dev/null 2>&1; echo $FASTDDS_DEFAULT_PROFILES_FILE"],
                          env={**env, "FASTDDS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"}, capture_output=True,
                          text=True, timeout=60).stdout.strip()
    assert mine == "/etc/mine.xml"
