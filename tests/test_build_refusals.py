"""A build_wheel preflight refusal is a preflight, not a failed build: TaskResult.preflight is set
for what facts alone refuse (it stops the host while planning even after an earlier task's
command was simulated, as pip_install's and verify's refusals do), every refusal carries
``data["preflight"]``, and the summary's class line and the report never call a refused class
"build failed" or name a refused host its builder. The engine over a double of our own
Connection (tests/support/fake_connection.py), as tests/test_engine.py drives it."""

from __future__ import annotations

from fleetctl.reporting.report_model import summarise
from fleetctl.reporting.tables import build_classes
from tests.support import fake_connection as fake
from tests.test_engine import fake_kind, make_hosts, playbook, run  # noqa: F401 - fake_kind: a fixture

#: A command before the build: simulated while planning, so later answers may be stale.
CHECKOUT_THEN_BUILD = """
name: upload and update a checkout, then build
hosts: all
tasks:
  - name: upload
    copy: {src: toy, dest: "{{ workdir }}/src/toy"}
  - name: update the checkout
    command: {argv: [git, -C, "{{ workdir }}/src/toy", pull, --ff-only]}
  - name: build
    build_wheel: {src: "{{ workdir }}/src/toy", out_dir: "{{ workdir }}/wheels", check_sass: false,
                  required_build_packages: [setuptools], tool: pip}
"""


def test_a_refusal_from_facts_stops_the_host_while_planning_after_a_simulated_command(fake_kind, tmp_path):
    hosts = make_hosts(["bad", "good"], bad={"cuda_home": "/opt/cuda-12.9"})
    model, _ = run(playbook(tmp_path, CHECKOUT_THEN_BUILD), hosts)
    bad = model.hosts["bad"]
    assert bad.status == "failed" and "preflight: cuda_home /opt/cuda-12.9 has no bin/nvcc" in bad.error
    assert not fake.HOSTS["bad"].ran("pull"), "the checkout ran on a host its build refused from facts alone"
    assert fake.HOSTS["good"].ran("pull") and fake.HOSTS["good"].ran("--wheel-dir")
    build = [t for t in bad.tasks if t.action == "build_wheel"][0]
    assert build.data["preflight"] == ["cuda_home /opt/cuda-12.9 has no bin/nvcc (fix the host var 'cuda_home')"]


def test_a_class_its_preflight_refused_everywhere_is_not_a_failed_build(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2"])
    for h in ("n1", "n2"):  # the venv lacks a build requirement: no member can build
        fake.HOSTS[h].facts["missing_modules"] = ["setuptools"]
    model, _ = run(playbook(tmp_path), hosts)
    assert {h: o.status for h, o in model.hosts.items()} == {"n1": "failed", "n2": "failed"}
    for h in ("n1", "n2"):
        build = [t for t in model.hosts[h].tasks if t.action == "build_wheel"][0]
        assert build.msg.startswith("preflight: build requirements missing in /venv: setuptools")
        assert build.data["preflight"] and not fake.HOSTS[h].ran("--wheel-dir")
    results = {name: model.host_json(name, facts=False) for name in model.hosts}
    [line] = build_classes(results)
    assert line.endswith("(not built: preflight failed on n[1-2])") and "build failed" not in line, line
    [klass] = summarise({"hosts": results}, {}, []).classes
    assert klass.built_on == [] and klass.failed == "n[1-2]"
