"""The HTML report and the metrics, end to end: real runs over sshd test hosts, a real headless browser.

One fleet of seven sshd test hosts: gpu01-03 (H200, one arch class), gpu04-05 (RTX PRO 6000, a
class whose build fails with a real nvcc error whose line carries hostile HTML) and gpu06-07
(nothing listens: unreachable). A toy package (tests/data/toy_kernels) keeps the builds to seconds.
A first run on gpu01 alone succeeds; the second, on all seven, fails in two ways. Both records are
rendered by `fleetctl report`, and a 200-host record made from the second by the engine's model;
Chromium renders each, takes a screenshot, and its DOM and net log are checked. The metrics file
written by both runs is parsed back with prometheus_client's parser.
"""

from __future__ import annotations

import html
import html.parser
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.browser import dump_dom, page_requests, png_size, screenshot
from tests.support.fake_gpu import H200, RTX_PRO_6000, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, write_inventory
from tests.support.records import alias_record
from tests.support.sshd import free_port
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

TOY = REPO / "tests" / "data" / "toy_kernels"
PLAY = """\
name: toy kernels
hosts: all
vars:
  src_dir: "{{{{ workdir }}}}/src/toy"
tasks:
  - name: Upload the toy sources
    copy: {{src: {src}, dest: "{{{{ src_dir }}}}"}}
  - name: Build the toy wheel for {{{{ facts.build.torch_cuda_arch_list }}}}
    build_wheel: {{src: "{{{{ src_dir }}}}", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [],
                  check_sass: false, tool: pip, min_free_disk_mib: 1}}
    register: build
  - name: Install the toy wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
  - name: Verify toyfp4
    verify: {{package: toyfp4, symbols: [hello, build_info], smoke: false}}
"""


class DomRows(html.parser.HTMLParser):
    """Collects the elements a test reads from a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}      # host table: data-host -> data-status
        self.causes: list[dict] = []        # details.cause attributes
        self.tags: dict[str, int] = {}
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "tr" and "data-host" in a:
            self.rows[a["data-host"]] = a.get("data-status")
        if tag == "details" and "cause" in (a.get("class") or ""):
            self.causes.append(a)
        for k in ("src", "href", "action", "xlink:href"):
            v = a.get(k) or ""
            if v and not v.startswith("#"):
                self.external.append(f"{tag} {k}={v}")


def parse_dom(dom: str) -> DomRows:
    p = DomRows()
    p.feed(dom)
    return p


def metrics(path: Path) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text file, parsed with prometheus_client: (name, labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(m, name, **labels):
    return m[(name, tuple(sorted({"playbook": "play", "file": "fleetctl.prom", **labels}.items())))]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, client_key):
    """The two real runs (shared by the tests of this module): their record folders, the metrics
    file after each, and the CLI results."""
    import tempfile

    from tests.conftest import SshdFarm

    tmp = tmp_path_factory.mktemp("report")
    root = Path(tempfile.mkdtemp(prefix="fleetctl-sshd-"))
    os.chmod(root, 0o755)
    farm = SshdFarm(root, client_key)
    try:
        hosts = {}
        for name, gpu in (("gpu01", H200), ("gpu02", H200), ("gpu03", H200), ("gpu04", RTX_PRO_6000),
                          ("gpu05", RTX_PRO_6000)):
            h = farm.start(name)
            write_fake_nvidia_smi(h.bin_dir, [gpu])
            # fake GPUs (a script named nvidia-smi): verify on the CPU, not on them
            hosts[name] = {**h.inventory_vars(farm.known_hosts), "workdir": str(tmp / "work" / name),
                           "venv": make_host_venv(tmp / f"venv-{name}"), "verify_device": "cpu"}
        for name in ("gpu06", "gpu07"):  # nothing listens there
            hosts[name] = {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "venv": str(tmp / "none"),
                           "ansible_ssh_private_key_file": str(client_key), "known_hosts": str(farm.known_hosts)}
        inv = write_inventory(tmp / "inv.yaml", {"gpus": hosts})
        play = tmp / "play.yaml"
        play.write_text(PLAY.format(src=TOY))
        prom_dir = tmp / "textfile"
        prom_dir.mkdir()
        prom = prom_dir / "fleetctl.prom"
        first = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu01", "--playbook", str(play),
                         "--metrics-file", str(prom), home=tmp, timeout_s=600)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        runs = sorted(p for p in (tmp / "runs").iterdir() if p.is_dir())
        m1 = metrics(prom)
        second = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play),
                          "--metrics-file", str(prom), home=tmp, timeout_s=900)
        assert second.returncode == 1, second.stdout[-4000:] + second.stderr[-2000:]
        runs2 = sorted(p for p in (tmp / "runs").iterdir() if p.is_dir())
        yield {"tmp": tmp, "one": runs[-1], "all": runs2[-1], "m1": m1, "m2": metrics(prom), "first": first,
               "second": second, "prom": prom}
    finally:
        farm.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def test_a_failed_run_ends_with_one_line_per_unreachable_host_and_pointers(fleet):
    out = fleet["second"].stdout
    run_id = fleet["all"].name
    assert f"fleetctl logs {run_id} " in out and f"fleetctl report {run_id} --html " in out
    for host in ("gpu06", "gpu07"):
        lines = [ln for ln in out.splitlines() if host in ln and "UNREACHABLE" in ln]
        assert len(lines) == 2, lines  # as it happened, and once under the table: never one per task
    assert "{{" not in out  # no unrendered template
    assert "sha256sum:" not in out  # probes are quiet


def test_metrics_per_host_and_the_last_success_kept_across_a_failed_run(fleet):
    m1, m2 = fleet["m1"], fleet["m2"]
    assert sample(m1, "fleetctl_run_success") == 1
    t1 = sample(m1, "fleetctl_run_timestamp_seconds")
    assert sample(m1, "fleetctl_last_success_timestamp_seconds") == t1
    assert sample(m1, "fleetctl_host_build_info", host="gpu01", **{"class": sample_key(m1, "gpu01")},
                  archs="9.0a", role="build", built_on="gpu01") == 1

    assert sample(m2, "fleetctl_run_success") == 0
    assert sample(m2, "fleetctl_run_timestamp_seconds") > t1
    assert sample(m2, "fleetctl_last_success_timestamp_seconds") == t1  # kept from the first run's file
    expected = {"gpu01": "ok", "gpu02": "ok", "gpu03": "ok", "gpu04": "failed", "gpu05": "failed",
                "gpu06": "unreachable", "gpu07": "unreachable"}
    for host, status in expected.items():
        assert sample(m2, "fleetctl_host_status", host=host, status=status) == 1
        assert sample(m2, "fleetctl_host_success", host=host) == (1 if status == "ok" else 0)
        others = [s for s in ("ok", "failed", "unreachable", "not started", "interrupted") if s != status]
        assert all(sample(m2, "fleetctl_host_status", host=host, status=s) == 0 for s in others)
        if status == "ok":
            assert sample(m2, "fleetctl_host_phase_duration_seconds", host=host, phase="verify") > 0
            assert sample(m2, "fleetctl_host_last_success_timestamp_seconds", host=host) > 0
    assert sample(m2, "fleetctl_host_last_success_timestamp_seconds", host="gpu01") == t1 or \
        sample(m2, "fleetctl_host_last_success_timestamp_seconds", host="gpu01") > t1
    record = json.loads((fleet["all"] / "run.json").read_text())
    sha = {t["data"]["sha256"] for h in ("gpu01", "gpu02", "gpu03") for t in record["hosts"][h]["tasks"]
           if t["action"] == "pip_install"}
    assert len(sha) == 1
    wheels = {k: v for k, v in m2.items() if k[0] == "fleetctl_host_wheel_info"}
    assert {dict(k[1])["host"] for k in wheels} == {"gpu01", "gpu02", "gpu03"}
    assert {dict(k[1])["sha256"] for k in wheels} == sha
    roles = {dict(k[1])["host"]: dict(k[1]) for k in m2 if k[0] == "fleetctl_host_build_info"}
    assert roles["gpu02"]["role"] == "push" and roles["gpu02"]["built_on"] == "gpu01"
    assert roles["gpu04"]["role"] == "fail"
    assert not [p for p in fleet["prom"].parent.iterdir() if p.name != "fleetctl.prom"]  # no temp file left


def sample_key(m, host):
    return next(dict(k[1])["class"] for k in m if k[0] == "fleetctl_host_build_info" and dict(k[1])["host"] == host)


def render(fleet, run_dir: Path, out: Path) -> Path:
    env_home = fleet["tmp"]
    res = fleetctl("report", run_dir.name, "--html", str(out), home=env_home)
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout
    return out


def check_self_contained(page: Path, tmp: Path) -> DomRows:
    """The page asks for nothing: a CSP forbidding fetches, no external URL in the HTML, no
    request in Chromium's net log; hostile host output stays text."""
    text = page.read_text()
    assert "default-src 'none'" in html.unescape(text)
    assert not re.findall(r"(?:src|href)\s*=\s*[\"']?(?!#)[a-z]+:", text, re.I)
    net = tmp / f"{page.stem}.netlog.json"
    dom = dump_dom(page, net_log=net)
    assert page_requests(net) == []
    rows = parse_dom(dom)
    assert rows.external == []
    assert rows.tags.get("script") == 1 and rows.tags.get("img") is None
    assert "pwned" not in dom.split("<title>")[1].split("</title>")[0]
    return rows


def test_the_leak_check_sees_a_leaking_page(tmp_path):
    # the net log check is real: a page that loads an image is caught
    page = tmp_path / "leak.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/leak.png"></body></html>')
    net = tmp_path / "net.json"
    dump_dom(page, net_log=net)
    assert page_requests(net) == ["http://127.0.0.1:9/leak.png"]


def test_report_of_the_failed_run_in_a_browser(fleet, tmp_path):
    page = render(fleet, fleet["all"], tmp_path / "report.html")
    rows = check_self_contained(page, tmp_path)
    record = json.loads((fleet["all"] / "run.json").read_text())
    assert rows.rows == {h: r["status"] for h, r in record["hosts"].items()}  # every host, its status
    causes = {c["data-hosts"]: c["data-status"] for c in rows.causes}
    # one cause: the class's build failed on gpu04 and, tried once more, on gpu05 the same way
    assert causes == {"gpu[04-05]": "failed", "gpu[06-07]": "unreachable"}
    dom = dump_dom(page)
    assert "connection refused by &lt;host&gt;" in dom  # two unreachable hosts, one folded cause
    first = re.search(r'<code class="first-error">([^<]*)</code>', dom)
    assert first and "#error" in first.group(1) and "&lt;img src=" in first.group(1)
    # the class's build failed on gpu04 and, tried once more, on gpu05 (a real source error fails everywhere)
    builds = {h: [t for t in record["hosts"][h]["tasks"] if t["action"] == "build_wheel"][0] for h in ("gpu04", "gpu05")}
    assert all(t["msg"].startswith("build failed (pip): ") and "#error" in t["msg"] for t in builds.values()), builds
    assert re.search(r'<tr id="class-\d+" data-key="\w+"><td><code>\w+</code></td><td>9\.0a', dom)
    assert "gpu[02-03]" in dom  # the wheel pushed to gpu02-03
    assert "gpu01" in dom.split('id="classes"')[1].split("</table>")[0]
    png = screenshot(page, tmp_path / "report.png", height=2200)
    assert png_size(png) == (1280, 2200) and png.stat().st_size > 30_000
    if os.environ.get("FLEETCTL_SCREENSHOT_DIR"):
        shutil.copy(png, Path(os.environ["FLEETCTL_SCREENSHOT_DIR"]) / "report-screenshot.png")
        shutil.copy(page, Path(os.environ["FLEETCTL_SCREENSHOT_DIR"]) / "report-example.html")


def test_report_of_one_host(fleet, tmp_path):
    page = render(fleet, fleet["one"], tmp_path / "one.html")
    rows = check_self_contained(page, tmp_path)
    assert rows.rows == {"gpu01": "ok"} and rows.causes == []
    png = screenshot(page, tmp_path / "one.png", height=900)
    assert png.stat().st_size > 10_000


def test_report_of_two_hundred_hosts(fleet, tmp_path):
    run_dir = alias_record(fleet["all"], tmp_path / "runs" / fleet["all"].name, 200)
    from fleetctl.reporting.html import write_report

    page = write_report(run_dir, tmp_path / "many.html")
    assert page.stat().st_size < 1_000_000
    rows = check_self_contained(page, tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    assert len(rows.rows) == 200 and rows.rows == {h: r["status"] for h, r in record["hosts"].items()}
    by_status = {}
    for c in rows.causes:
        by_status.setdefault(c["data-status"], []).append(c["data-hosts"])
    unreachable = [h for h, r in record["hosts"].items() if r["status"] == "unreachable"]
    from fleetctl.inventory import fold_hosts

    assert by_status["unreachable"] == [fold_hosts(unreachable)]  # one cause for 56 hosts
    dom = dump_dom(page)
    assert "hosts 1-100 of 200" in dom  # paginated, every row still in the DOM
    png = screenshot(page, tmp_path / "many.png", height=2400)
    assert png.stat().st_size > 30_000
