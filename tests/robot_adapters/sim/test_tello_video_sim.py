"""The Tello simulator's camera and battery, with the real djitellopy client in the client namespace.

Video: ``streamon`` + djitellopy's ``get_frame_read()`` (PyAV decoding the H.264 stream from UDP)
gets frames of the configured size that show the scene's photos where the camera model puts them;
a second simulator streams to another port at the same time; ``streamoff`` stops the frames.
State: the battery drains with flight time, reads and state packets agree, a low battery lands.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

djitellopy = pytest.importorskip("djitellopy")
av = pytest.importorskip("av")

from robot_adapters.scene import Scene  # noqa: E402
from robot_adapters.sim.tello_sim import LOW_BATTERY_ERROR, TelloSim  # noqa: E402
from robot_adapters.sim.tello_video_sim import (  # noqa: E402
    MAX_DATAGRAM,
    SceneRenderer,
    VideoStreamer,
    nal_units,
    project,
)

SIZE = (480, 360)  # the default
SIZE_B = (320, 240)  # drone B's, configured
CAT = {"objects": {"cat": {"pos": [250, 0, 80], "size": [80, 60]}}}  # in front of the hovering drone
CUP = {"objects": {"cup": {"pos": [200, 0, 30], "size": [40, 40]}}}  # in front of a drone on the floor


def _photos_available() -> bool:
    return SceneRenderer(None).photo("cat") is not None


def _tello(net, ip, **kw):
    return net.in_client(lambda: djitellopy.Tello(host=ip, retry_count=1, **kw))


def _end(tello) -> None:
    """djitellopy's end(), and nothing left for its __del__ to do: a drone that landed by itself is
    still flying for djitellopy, and a finalizer sending "land" to a forgotten host raises."""
    tello.end()
    tello.is_flying = tello.stream_on = False
    tello.background_frame_read = None


def _latest_after(reader, n: int = 3, deadline_s: float = 15.0):
    """The frame decoded after ``n`` new frames arrived (frames decoded before are stale)."""
    seen, count = reader.frame, 0
    end = time.monotonic() + deadline_s
    while count < n and time.monotonic() < end:
        f = reader.frame
        if f is not seen:
            seen, count = f, count + 1
        time.sleep(0.01)
    assert count >= n, f"only {count} new frames"
    return seen


def _inner(box, size=SIZE, keep=0.6):
    """The middle ``keep`` of a box, in pixels (H.264 blurs the edges)."""
    w, h = size
    cx, cy = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    hw, hh = (box.x1 - box.x0) * keep / 2, (box.y1 - box.y0) * keep / 2
    return (slice(max(0, int(cy - hh)), min(h, int(cy + hh))), slice(max(0, int(cx - hw)), min(w, int(cx + hw))))


def _mean(img, region):
    return img[region].reshape(-1, 3).mean(axis=0)


# ----------------------------------------------------------------------------- no network
def test_projection_is_the_scene_camera_model():
    scene = Scene.from_dict({"objects": {"cat": {"pos": [300, 50, 30], "size": [40, 30]},
                                         "cup": {"pos": [150, -60, 90], "size": [12, 10]}}})
    for pose in ([0, 0, 80, 0], [50, 20, 60, 15], [0, 0, 0, -10], [100, 0, 120, 170]):
        scene.set_pose(*pose)
        for name, o in scene.objects.items():
            p = project(o, tuple(pose), SIZE)
            assert (p is not None) == scene.is_visible(name), (pose, name)
            if p is None:
                continue
            box, dist = p
            assert (box.x0 + box.x1) / 2 / SIZE[0] == pytest.approx(scene.object_x(name), abs=2e-3)
            assert (box.y0 + box.y1) / 2 / SIZE[1] == pytest.approx(scene.object_y(name), abs=2e-3)
            assert (box.x1 - box.x0) / SIZE[0] == pytest.approx(scene.object_width(name), abs=2e-3)
            assert (box.y1 - box.y0) / SIZE[1] == pytest.approx(scene.object_height(name), abs=2e-3)
            assert dist == pytest.approx(scene.object_dis(name), abs=0.1)


def test_an_object_without_a_photo_is_not_drawn_and_logged_once(caplog):
    scene = Scene.from_dict({"objects": {"banana": {"pos": [200, 0, 80], "size": [40, 20]}}})
    r, empty = SceneRenderer(scene, SIZE), SceneRenderer(None, SIZE)
    with caplog.at_level(logging.WARNING, logger="timely_fleet.tello_sim"):
        for yaw in (0.0, 5.0):
            assert np.array_equal(r.render((0, 0, 80, yaw)), empty.render((0, 0, 80, yaw)))
    assert len([m for m in caplog.messages if "banana" in m]) == 1


class _Capture:
    def __init__(self):
        self.datagrams: list[bytes] = []

    def sendto(self, data, addr):
        self.datagrams.append(bytes(data))


def test_stream_is_annex_b_with_sps_pps_at_every_idr_and_a_late_decoder_starts():
    cap = _Capture()
    r = SceneRenderer(Scene.from_dict(CAT), SIZE)
    r.render((0, 0, 80, 0))  # load the photos before the clock starts
    s = VideoStreamer(r, lambda: (0.0, 0.0, 80.0, 0.0), lambda: ("10.0.0.1", 11111), cap, fps=40, keyframe_s=0.1)
    s.start()
    deadline = time.monotonic() + 20
    while s.stats()["keyframes"] < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    s.stop()
    assert s.stats()["keyframes"] >= 3
    assert cap.datagrams and all(len(d) <= MAX_DATAGRAM for d in cap.datagrams)
    stream = b"".join(cap.datagrams)
    assert stream.startswith(b"\x00\x00\x00\x01") or stream.startswith(b"\x00\x00\x01")
    types = nal_units(stream)
    idrs = [i for i, t in enumerate(types) if t == 5 and (i == 0 or types[i - 1] != 5)]
    assert len(idrs) >= 3
    for i in idrs:  # SPS and PPS before every keyframe (SEI may sit between)
        before = [t for t in types[max(0, i - 4):i] if t != 6]
        assert before[-2:] == [7, 8], types[max(0, i - 4):i + 1]
    # a decoder joining at the second keyframe decodes frames of the configured size
    second_sps = [i for i, t in enumerate(types) if t == 7][1]
    pos, n = -1, -1
    while n < second_sps:
        pos = stream.find(b"\x00\x00\x01", pos + 1)
        n += 1
    dec = av.CodecContext.create("h264", "r")
    frames = [f for p in dec.parse(stream[max(0, pos - 1):]) for f in dec.decode(p)]
    frames += list(dec.decode(None))
    assert frames and (frames[0].width, frames[0].height) == SIZE


# ----------------------------------------------------------------------------- djitellopy
@pytest.fixture(scope="module")
def two_drones(tello_net):
    """Drone A (cat ahead) streaming to 11111 and drone B (cup ahead) to 11112, both decoded by
    djitellopy in this process."""
    if not _photos_available():
        pytest.skip("scikit-image's photos are not installed")
    net = tello_net
    ip_a, ip_b = net.sim_ips[0], net.sim_ips[1]
    sim_a = net.in_sim(lambda: TelloSim(ip_a, time_scale=0.1, scene=Scene.from_dict(CAT)).start())
    sim_b = net.in_sim(lambda: TelloSim(ip_b, time_scale=0.1, scene=Scene.from_dict(CUP), frame_size=SIZE_B).start())
    ta, tb = _tello(net, ip_a), _tello(net, ip_b, vs_udp=11112)
    readers: dict[str, object] = {}
    try:
        ta.connect()
        tb.connect()
        tb.change_vs_udp(11112)  # "port 8890 11112": drone B's video goes to 11112
        took = {}

        def open_reader(key, t):
            t0 = time.monotonic()
            t.streamon()
            readers[key] = net.in_client(lambda: t.get_frame_read())  # PyAV opens udp://@0.0.0.0:port
            _latest_after(readers[key], 1)
            took[key] = time.monotonic() - t0

        threads = [threading.Thread(target=open_reader, args=(k, t)) for k, t in (("a", ta), ("b", tb))]
        for th in threads:
            th.start()
        for th in threads:
            th.join(40)
        assert set(readers) == {"a", "b"}, "a frame reader did not start"
        print(f"first decoded frame after streamon: {took}")  # ~5 s: PyAV probes 5 s of stream
        yield {"sim_a": sim_a, "sim_b": sim_b, "ta": ta, "tb": tb, "ra": readers["a"], "rb": readers["b"]}
    finally:
        # djitellopy's reader thread leaves its decode loop (closing its UDP port) only when a
        # frame arrives after streamoff: send one, so later tests can bind 11111/11112 again.
        leaked = []
        for t, sim, key in ((ta, sim_a, "a"), (tb, sim_b, "b")):
            r = readers.get(key)
            try:
                if r is not None and r.worker.is_alive():
                    r.stopped = True
                    t.send_control_command("streamon")
                    r.worker.join(10)
                    if r.worker.is_alive():
                        leaked.append(key)
                t.send_control_command("streamoff")
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
            _end(t)
            sim.stop()
        assert not leaked, f"djitellopy frame readers still hold their UDP ports: {leaked}"


def test_frames_have_the_configured_size(two_drones):
    for r, (w, h) in ((two_drones["ra"], SIZE), (two_drones["rb"], SIZE_B)):
        assert _latest_after(r, 1).shape == (h, w, 3)
    assert two_drones["sim_b"].video_port == 11112


def test_the_cat_photo_is_where_the_camera_sees_it_and_gone_when_turned_away(two_drones):
    sim, tello, reader = two_drones["sim_a"], two_drones["ta"], two_drones["ra"]
    tello.takeoff()
    pose = sim.pose()
    box, _ = sim.renderer.visible_boxes(pose)["cat"]
    region = _inner(box)
    rendered = sim.renderer.render(pose)
    frame = _latest_after(reader)
    # the render holds the cat's photo, scaled to the box, exactly there
    ox, oy = int(round(box.x0)), int(round(box.y0))
    bw, bh = int(round(box.x1)) - ox, int(round(box.y1)) - oy
    photo = sim.renderer._scaled("cat", sim.renderer.photo("cat"), bw, bh)
    assert np.array_equal(rendered[oy:oy + bh, ox:ox + bw], photo)
    cat_mean = _mean(rendered, region)
    assert np.abs(_mean(frame, region) - cat_mean).max() < 12  # and so does the decoded frame
    tello.rotate_clockwise(90)
    turned = sim.pose()
    assert "cat" not in sim.renderer.visible_boxes(turned)
    background = _mean(sim.renderer.render(turned), region)
    assert np.abs(background - cat_mean).max() > 40  # the cat does not look like the wall
    after = _mean(_latest_after(reader), region)
    assert np.abs(after - background).max() < 12
    tello.land()


def test_a_second_drone_streams_its_own_view_to_11112_at_the_same_time(two_drones):
    sim, reader = two_drones["sim_b"], two_drones["rb"]
    pose = sim.pose()
    box, _ = sim.renderer.visible_boxes(pose)["cup"]
    region = _inner(box, SIZE_B)
    frame_b = _latest_after(reader)
    assert np.abs(_mean(frame_b, region) - _mean(sim.renderer.render(pose), region)).max() < 12
    frame_a = _latest_after(two_drones["ra"])  # drone A streams on meanwhile
    assert frame_a.shape != frame_b.shape
    assert two_drones["sim_a"].video.stats()["frames"] > 0 and sim.video.stats()["frames"] > 0


def test_streamoff_stops_the_frames(two_drones):
    sim, tello, reader = two_drones["sim_b"], two_drones["tb"], two_drones["rb"]
    _latest_after(reader, 1)
    tello.streamoff()  # the simulator answers after its last datagram went out
    assert not sim.video.running
    sent = sim.video.stats()["frames"]
    time.sleep(0.3)  # a frame already on its way (the decoder holds one back) may still come
    last = reader.frame
    time.sleep(0.6)  # six frame periods: none comes
    assert reader.frame is last
    assert sim.video.stats()["frames"] == sent


# ----------------------------------------------------------------------------- battery and state
def _packet(tello):
    """The state djitellopy parsed from a packet made after this call (the second one to come)."""
    end = time.monotonic() + 5
    for _ in range(2):
        before = tello.get_current_state()
        while tello.get_current_state() is before and time.monotonic() < end:
            time.sleep(0.01)
    return tello.get_current_state()


def test_battery_drains_with_flight_time_and_reads_agree(tello_net):
    ip = tello_net.sim_ips[2]
    sim = tello_net.in_sim(lambda: TelloSim(ip, time_scale=0.05, battery=50, temp_rise_per_s=0.1).start())
    tello = _tello(tello_net, ip)
    try:
        tello.connect()
        tello.takeoff()
        while sim.state.flight_time < 40:  # 40 s of simulated flight (2 s here)
            time.sleep(0.05)
        st = _packet(tello)
        assert st["bat"] <= 50 - int(0.12 * 40)  # 0.12 %/s in flight
        assert abs(tello.query_battery() - st["bat"]) <= 1  # "battery?" and the packet agree
        assert st["h"] == 80 and st["tof"] == 80 and tello.query_distance_tof() == 80
        assert tello.send_read_command("height?") == "8dm"
        assert st["time"] >= 40 and int(tello.send_read_command("time?").rstrip("s")) >= st["time"]
        assert st["templ"] >= 63 and st["temph"] == st["templ"] + 2  # 0.1 C/s in flight
        lo, hi = tello.send_read_command("temp?").rstrip("C").split("~")
        assert int(hi) - int(lo) == 2 and int(lo) >= st["templ"]
        tello.land()
        st = _packet(tello)
        assert st["h"] == 0 and st["tof"] == 10 and tello.query_distance_tof() == 10
    finally:
        _end(tello)
        sim.stop()


def test_low_battery_lands_the_drone_and_the_motion_answers_error(tello_net):
    ip = tello_net.sim_ips[3]
    sim = tello_net.in_sim(lambda: TelloSim(ip, time_scale=0.1, battery=60).start())
    tello = _tello(tello_net, ip)
    try:
        tello.connect()
        tello.takeoff()
        box: dict[str, BaseException] = {}

        def move():
            try:
                tello.move_forward(500)  # 9.5 s simulated
            except BaseException as e:  # noqa: BLE001
                box["error"] = e

        t = threading.Thread(target=move)
        t.start()
        while sim.state.motion != "forward 500" and t.is_alive():
            time.sleep(0.01)
        sim.set_battery(9)
        t.join(10)
        assert isinstance(box.get("error"), djitellopy.TelloException)
        assert LOW_BATTERY_ERROR in str(box["error"])
        while sim.state.flying or sim.state.motion:  # lands in 4 s simulated
            time.sleep(0.02)
        st = _packet(tello)
        assert st["h"] == 0 and st["bat"] == 9 and tello.query_battery() == 9
        assert 0 < sim.state.x < 500  # it landed where it was
        with pytest.raises(djitellopy.TelloException, match="battery low"):
            tello.takeoff()
    finally:
        _end(tello)
        sim.stop()


def test_cli_scene_file_and_video_option(tmp_path):
    from robot_adapters.sim.tello_sim import _parse_video, load_scene

    (tmp_path / "s.yaml").write_text("objects:\n  cat: {pos: [300, 50, 30], size: [40, 30]}\n")
    (tmp_path / "s.json").write_text('{"objects": {"cup": {"pos": [100, 0, 80]}}}')
    assert load_scene(str(tmp_path / "s.yaml")).objects["cat"].size == (40.0, 30.0)
    assert load_scene(str(tmp_path / "s.json")).objects["cup"].pos == [100.0, 0.0, 80.0]
    assert _parse_video("960x720@30") == ((960, 720), 30.0)
    assert _parse_video("off") is None
