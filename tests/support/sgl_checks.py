"""The checks one sgl-kernel revision must pass, shared by CI (fixture trees written in
tests/support/sgl_families.py) and scripts/sgl_history.py (every real revision of upstream's
history, run by hand where a clone exists).

A revision is a tree holding ``CMakeLists.txt`` and ``python/sgl_kernel/flash_attn.py`` in one of
the two layouts. :func:`check_revision` copies it, runs ``playbooks/scripts/patch_sgl_kernel.py``
as a host would (a subprocess), configures the patched logic with a real ``cmake``
(tests/support/cmake_slice.py) and imports the patched ``flash_attn.py`` in a fresh interpreter,
and returns one result per check:

``applies``         exit 0, one status line per patch (or, for a tree whose FA3 cannot be
                    switched off, the expected refusal: exit 1, file, line and construct named,
                    no byte changed)
``idempotent``      a second run and ``--check`` change no byte and report nothing to apply
``honest-status``   ``fa3-respect-option`` is not "Not needed" where the unpatched tree ignores
                    ``-DSGL_KERNEL_ENABLE_FA3=OFF``
``fa3-off``         patched, CUDA 12.8 (where upstream forces FA3): ``-D...=OFF`` skips flash_ops,
                    and so does a re-configure of that build directory without the -D
``fa3-on``          patched, CUDA 12.0 (no forcing): ``-D...=ON`` builds flash_ops
``fa3-default``     without a -D, the patched tree decides as the unpatched one (CUDA 12.0, 12.8)
``policies``        every ``cmake_policy(SET ...)`` guarded by ``if(POLICY ...)``, and the patched
                    logic configures on this CMake (which may not know the policies)
``cccl``            with CUDA 13 the toolkit's ``include/cccl`` is an include directory; not with 12.8
``threads``         ``-DSGL_KERNEL_COMPILE_THREADS=3`` makes every nvcc ``--threads=3``
``import``          patched ``flash_attn.py`` imports without flash_ops (``flash_ops is None``, a
                    RuntimeWarning) and binds flash_ops when it is there

Each result is ``{"ok": True|False|None, "detail": str}``; ``None`` means not applicable (no FA3
in the tree, no ``--threads``, no flash_ops import, or the tree was refused as expected).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from .cmake_slice import fa3_module_statement, probe_project, probe_results, statements, strip_comments
from .stub_import import import_flash_attn

REPO = Path(__file__).resolve().parents[2]
PATCH_SCRIPT = REPO / "playbooks" / "scripts" / "patch_sgl_kernel.py"
LAYOUT_DIRS = {"sgl-kernel": "sgl-kernel", "aot": "python/sglang/kernels/aot"}
CHECKS = ("applies", "idempotent", "honest-status", "fa3-off", "fa3-on", "fa3-default", "policies", "cccl",
          "threads", "import")
STATUS_RE = re.compile(r"^(Applied|Already applied|Not needed|Would apply): (\S+)$")


def find_cmake() -> str:
    """The ``cmake`` to configure with: PATH, else the one beside this interpreter (PyPI's cmake).

    Raises:
        RuntimeError: no cmake at all (CI installs one: scripts/setup.sh).
    """
    found = shutil.which("cmake")
    if found:
        return found
    beside = Path(sys.executable).parent / "cmake"
    if beside.exists():
        return str(beside)
    raise RuntimeError("no cmake on PATH or beside %s; scripts/setup.sh installs PyPI's cmake" % sys.executable)


def cmake_version(cmake: str) -> tuple[int, int]:
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# ------------------------------------------------------------------------------------------------
# construct families


def describe_condition(cond: str) -> str:
    """An if() condition in words: ``CUDA >= 12.4 or SGL_KERNEL_ENABLE_SM90A``."""
    words = []
    for tok in re.findall(r'"[^"]*"|\S+', cond):
        t = tok.strip('"')
        comparisons = {"VERSION_GREATER_EQUAL": ">=", "VERSION_GREATER": ">", "VERSION_LESS": "<",
                       "VERSION_LESS_EQUAL": "<=", "VERSION_EQUAL": "=="}
        if t in comparisons:
            words.append(comparisons[t])
        elif t == "${CUDA_VERSION}" or t == "CUDA_VERSION":
            words.append("CUDA")
        elif t in ("AND", "OR", "NOT"):
            words.append(t.lower())
        else:
            words.append(t)
    return " ".join(words)


def features(cmake_text: str, flash_attn_text: str | None, layout: str) -> dict[str, str]:
    """The constructs of one revision that the patch script must handle, described in words.

    Two revisions with equal features are one construct family; CI holds one fixture per family.
    """
    stmts = statements(cmake_text)
    code = "\n".join(f"{st.name}({strip_comments(st.args)})" for st in stmts)
    policies = sorted({m.group(1) for st in stmts if st.name == "cmake_policy"
                       for m in [re.search(r"SET\s+(CMP\d{4})", st.args)] if m})
    target = fa3_module_statement(stmts)
    fa3 = "none"
    if target is None:
        if re.search(r"\$\{FA3_GEN_SRCS\}|flash-attention_SOURCE_DIR\}/hopper/flash_api", code):
            fa3 = "sources in common_ops, no switch"
    else:
        stack: list[str] = []
        gate = ""
        for st in stmts:
            if st is target:
                gate = " ".join(stack)
                break
            if st.name == "if":
                stack.append(st.args)
            elif st.name in ("elseif", "else") and stack:
                stack[-1] = st.args or "else"
            elif st.name == "endif" and stack:
                stack.pop()
        switch = re.findall(r"\b(SGL_KERNEL_ENABLE_FA3|BUILD_FA3)\b", gate)
        fa3 = "switch " + (switch[0] if switch else "unknown")
        option = [strip_comments(st.args).split() for st in stmts
                  if st.name == "option" and re.match(r"\s*SGL_KERNEL_ENABLE_FA3\s", st.args)]
        if option:
            default = option[0][-1]
            fa3 += ", option default " + (default if not default.startswith("${") else "from " + default[2:-1])
        else:
            fa3 += ", no option"
        forced = []
        stack = []
        for st in stmts:
            if st.name == "if":
                stack.append(st.args)
            elif st.name == "endif" and stack:
                stack.pop()
            elif st.name == "set" and re.match(r"\s*(SGL_KERNEL_ENABLE_FA3|BUILD_FA3)\s+ON\s*$", st.args):
                forced.append(" and ".join(describe_condition(c) for c in stack) or "always")
        if forced:
            fa3 += ", forced ON when " + "; ".join(forced)
    threads = "none"
    if re.search(r"--threads=\d", code):
        threads = "fixed --threads=N"
    elif re.search(r"--threads=\$\{SGL_KERNEL_COMPILE_THREADS\}", code):
        threads = "SGL_KERNEL_COMPILE_THREADS"
    anchor = "include_directories" if any(st.name == "include_directories" for st in stmts) else "none"
    return {
        "layout": layout,
        "policies": ",".join(policies) or "none",
        "include_anchor": anchor,
        "fa3": fa3,
        "threads": threads,
        "import": import_form(flash_attn_text),
    }


def import_form(text: str | None) -> str:
    """How flash_attn.py imports flash_ops: ``no file``, ``none``, ``bare``, ``try/except
    raising (N-line raise)``, ``try/except falling back``."""
    if text is None:
        return "no file"
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*from\s+(sgl_kernel|\.)\s+import\s+flash_ops\b", line):
            if i and lines[i - 1].strip() == "try:":
                handler = []
                for later in lines[i + 1:]:
                    if later.strip() and not later.startswith((" ", "\t")) and not later.startswith("except"):
                        break
                    handler.append(later)
                joined = "\n".join(handler)
                if "raise" in joined:
                    raise_lines = [ln for ln in handler if ln.strip() and not ln.strip().startswith("except")]
                    return f"try/except raising ({len(raise_lines)}-line raise)"
                return "try/except falling back"
            return "bare"
    return "none"


def family_key(feats: dict[str, str]) -> str:
    return " | ".join(f"{k}: {feats[k]}" for k in ("layout", "policies", "include_anchor", "fa3", "threads", "import"))


def expects_refusal(feats: dict[str, str]) -> bool:
    """Trees whose FA3 has no switch at all: the patch script must refuse them."""
    return feats["fa3"].startswith("sources in common_ops")


# ------------------------------------------------------------------------------------------------
# running things


def write_revision(root: Path, layout: str, cmake_text: str, flash_attn_text: str | None) -> Path:
    """Write a revision's two files under ``root`` in its layout; return the kernel dir."""
    kdir = Path(root) / LAYOUT_DIRS[layout]
    pkg = kdir / "python" / "sgl_kernel"
    pkg.mkdir(parents=True, exist_ok=True)
    (kdir / "CMakeLists.txt").write_bytes(cmake_text.encode("utf-8", "surrogateescape"))
    (pkg / "__init__.py").write_text("")
    if flash_attn_text is not None:
        (pkg / "flash_attn.py").write_bytes(flash_attn_text.encode("utf-8", "surrogateescape"))
    return kdir


def digest(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def run_patch(*args, python: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([python or sys.executable, str(PATCH_SCRIPT), *[str(a) for a in args]],
                          capture_output=True, text=True, timeout=120)


def parse_statuses(stdout: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in map(STATUS_RE.match, stdout.splitlines()) if m}


class Prober:
    """Configures probe projects (tests/support/cmake_slice.py) in a scratch folder."""

    def __init__(self, scratch: Path, cmake: str | None = None):
        self.scratch = Path(scratch)
        self.cmake = cmake or find_cmake()
        self.fake_cuda_include = self.scratch / "cuda" / "include"
        (self.fake_cuda_include / "cccl" / "thrust").mkdir(parents=True, exist_ok=True)
        self.count = 0

    def project(self, cmake_text: str, keep_policies: bool = True) -> Path:
        self.count += 1
        src = self.scratch / f"p{self.count}"
        src.mkdir()
        (src / "CMakeLists.txt").write_text(probe_project(cmake_text, keep_policies=keep_policies))
        return src

    def configure(self, src: Path, build: str, cuda: str, compiler: str | None = None,
                  **defines: str) -> tuple[int, dict[str, str], str]:
        args = [self.cmake, "-S", str(src), "-B", str(src / build), f"-DCUDA_VERSION={cuda}",
                f"-DCMAKE_CUDA_COMPILER_VERSION={compiler or cuda}",
                f"-DCUDAToolkit_INCLUDE_DIRS={self.fake_cuda_include}"]
        args += [f"-D{k}={v}" for k, v in defines.items()]
        res = subprocess.run(args, capture_output=True, text=True, timeout=300)
        return res.returncode, probe_results(res.stdout), (res.stderr.strip().splitlines() or [""])[0]

    def reconfigure(self, src: Path, build: str) -> tuple[int, dict[str, str]]:
        res = subprocess.run([self.cmake, "-S", str(src), "-B", str(src / build)], capture_output=True, text=True,
                             timeout=300)
        return res.returncode, probe_results(res.stdout)


def patch_names() -> tuple[str, ...]:
    """The patch names, in the order the script prints them (read from the script itself)."""
    m = re.search(r"^PATCH_NAMES = \(([^)]*)\)", PATCH_SCRIPT.read_text(), re.M)
    consts = dict(re.findall(r'^([A-Z0-9_]+) = "([a-z0-9-]+)"$', PATCH_SCRIPT.read_text(), re.M))
    return tuple(consts[n.strip()] for n in m.group(1).split(",") if n.strip())


def policies_guarded(text: str) -> tuple[bool, int]:
    """(every cmake_policy(SET CMPn ...) sits inside if(POLICY CMPn), how many there are)."""
    stack: list[str] = []
    count, ok = 0, True
    for st in statements(text):
        if st.name == "if":
            stack.append(st.args)
        elif st.name == "endif" and stack:
            stack.pop()
        elif st.name == "cmake_policy":
            m = re.search(r"SET\s+(CMP\d{4})", st.args)
            if m:
                count += 1
                ok = ok and any(re.search(r"\bPOLICY\s+%s\b" % m.group(1), c) for c in stack)
    return ok, count


def check_revision(cmake_text: str, flash_attn_text: str | None, layout: str, scratch: Path,
                   prober: Prober) -> dict:
    """Run every check (module docstring) on one revision; ``scratch`` must be an empty folder.

    Returns ``{"family": str, "features": {...}, "statuses": {patch: status}, "checks": {name:
    {"ok", "detail"}}, "ok": bool}`` (``ok``: no check failed)."""
    feats = features(cmake_text, flash_attn_text, layout)
    checks = {name: {"ok": None, "detail": "not applicable"} for name in CHECKS}

    def put(name: str, ok: object, detail: str) -> None:
        checks[name] = {"ok": bool(ok), "detail": detail}

    out = {"family": family_key(feats), "features": feats, "statuses": {}, "checks": checks}
    root = Path(scratch) / "tree"
    kdir = write_revision(root, layout, cmake_text, flash_attn_text)
    before = digest(root)
    first = run_patch(root)
    statuses = parse_statuses(first.stdout)
    out["statuses"] = statuses
    err = (first.stderr.strip().splitlines() or [""])[0]
    if expects_refusal(feats):
        refused = (first.returncode == 1 and not statuses and digest(root) == before
                   and "fa3-respect-option" in first.stderr and re.search(r"CMakeLists\.txt:\d+: ", first.stderr)
                   and "nothing was changed" in first.stderr)
        where = re.search(r"(CMakeLists\.txt:\d+)", first.stderr)
        put("applies", refused, "refused as it must be (exit %s) at %s, nothing changed" % (
            first.returncode, where.group(1) if where else "?"))
        for name in CHECKS[1:]:
            checks[name]["detail"] = "not applicable: the tree is refused"
        out["ok"] = bool(refused)
        return out
    names = patch_names()
    put("applies", first.returncode == 0 and tuple(statuses) == names,
        "exit %d; %s" % (first.returncode, ", ".join(f"{k}: {v}" for k, v in statuses.items()) or err))
    if first.returncode != 0:
        out["ok"] = False
        return out
    after = digest(root)
    second, check = run_patch(root), run_patch("--check", root)
    again = parse_statuses(second.stdout)
    expected_again = {k: ("Already applied" if v == "Applied" else v) for k, v in statuses.items()}
    put("idempotent", second.returncode == 0 and check.returncode == 0 and digest(root) == after
        and again == expected_again, "second run: %s; --check exit %d; bytes %s" % (
            "as expected" if again == expected_again else again, check.returncode,
            "unchanged" if digest(root) == after else "CHANGED"))

    patched = (kdir / "CMakeLists.txt").read_text(errors="surrogateescape")
    has_fa3 = fa3_module_statement(statements(cmake_text)) is not None
    up, pp = prober.project(cmake_text, keep_policies=False), prober.project(patched)
    rc_off, r_off, err_off = prober.configure(pp, "off", "12.8", compiler="13.0", SGL_KERNEL_ENABLE_FA3="OFF",
                                              SGL_KERNEL_COMPILE_THREADS="3")
    if has_fa3:
        _, r_before, _ = prober.configure(up, "off", "12.8", SGL_KERNEL_ENABLE_FA3="OFF")
        ignored = r_before.get("FA3_MODULE") == "built"
        status = statuses.get("fa3-respect-option")
        put("honest-status", not (ignored and status == "Not needed"),
            "unpatched tree %s -DSGL_KERNEL_ENABLE_FA3=OFF at CUDA 12.8; the patch said %s" % (
                "ignores" if ignored else "honours", status))
        rc_re, r_re = prober.reconfigure(pp, "off")
        put("fa3-off", rc_off == 0 and "FA3_MODULE" not in r_off and rc_re == 0 and "FA3_MODULE" not in r_re,
            "configure %s, flash_ops %s; re-configure without -D: flash_ops %s" % (
                "ok" if rc_off == 0 else "FAILED: " + err_off, r_off.get("FA3_MODULE", "skipped"),
                r_re.get("FA3_MODULE", "skipped")))
        rc_on, r_on, err_on = prober.configure(pp, "on", "12.0", SGL_KERNEL_ENABLE_FA3="ON")
        put("fa3-on", rc_on == 0 and r_on.get("FA3_MODULE") == "built",
            "CUDA 12.0, -D...=ON: flash_ops %s" % (r_on.get("FA3_MODULE", "skipped") if rc_on == 0 else "FAILED: " + err_on))
        pairs = []
        for cuda in ("12.0", "12.8"):
            _, rp, _ = prober.configure(pp, "d" + cuda, cuda)
            _, ru, _ = prober.configure(up, "d" + cuda, cuda)
            pairs.append((cuda, rp.get("FA3_MODULE", "skipped"), ru.get("FA3_MODULE", "skipped")))
        put("fa3-default", all(p == u for _, p, u in pairs),
            "; ".join(f"CUDA {c}: patched {p}, upstream {u}" for c, p, u in pairs))
    else:
        checks["honest-status"]["detail"] = checks["fa3-off"]["detail"] = "not applicable: no FA3 in this tree"
        checks["fa3-on"]["detail"] = checks["fa3-default"]["detail"] = "not applicable: no FA3 in this tree"

    guarded, count = policies_guarded(patched)
    rc_pol, _, _ = prober.configure(prober.project(cmake_text, keep_policies=True), "pol", "12.8")
    version = "%d.%d" % cmake_version(prober.cmake)
    put("policies", guarded and rc_off == 0,
        "%d policy setting(s) %s; patched logic configures on cmake %s: %s; unpatched: %s" % (
            count, "guarded" if guarded else "NOT all guarded", version, "yes" if rc_off == 0 else "NO: " + err_off,
            "fatal" if rc_pol else "configures"))

    _, r12, _ = prober.configure(pp, "c12", "12.8")
    want = f"{prober.fake_cuda_include}/cccl"
    put("cccl", want in r_off.get("INCS", "").split(";") and "cccl" not in r12.get("INCS", ""),
        "CUDA 13: %s; CUDA 12.8: %s" % ("include/cccl added" if want in r_off.get("INCS", "") else "MISSING",
                                       "none" if "cccl" not in r12.get("INCS", "") else "ADDED"))

    flags = [f for f in r_off.get("FLAGS", "").split(";") if f.startswith("--threads")]
    if feats["threads"] != "none":
        put("threads", flags and all(f == "--threads=3" for f in flags),
            "-DSGL_KERNEL_COMPILE_THREADS=3 gives %s" % (", ".join(flags) or "no --threads"))
    else:
        checks["threads"]["detail"] = "not applicable: nvcc gets no --threads"

    if feats["import"] not in ("no file", "none"):
        without = import_flash_attn(kdir, with_flash_ops=False)
        with_fo = import_flash_attn(kdir, with_flash_ops=True)
        bare = write_revision(Path(scratch) / "unpatched", layout, cmake_text, flash_attn_text)
        upstream = import_flash_attn(bare, with_flash_ops=False)
        ok = (without.get("imported") and without.get("flash_ops") is None and without.get("warnings")
              and with_fo.get("imported") and with_fo.get("flash_ops") == "sgl_kernel.flash_ops")
        put("import", ok, "without flash_ops: %s; with it: %s; unpatched without it: %s" % (
            "flash_ops is None, RuntimeWarning" if without.get("imported") and without.get("flash_ops") is None
            else without, with_fo.get("flash_ops") if with_fo.get("imported") else with_fo,
            "imports" if upstream.get("imported") else upstream.get("error", "?").split(":")[0]))
    else:
        checks["import"]["detail"] = "not applicable: flash_attn.py does not import flash_ops (%s)" % feats["import"]
    out["ok"] = all(c["ok"] is not False for c in checks.values())
    return out
