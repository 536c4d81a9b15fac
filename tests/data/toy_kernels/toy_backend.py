"""A minimal PEP 517 build backend: nvcc -cubin of toy.cu for each arch, then a pure-Python wheel.

With ``TOY_PLATFORM_WHEEL=1`` in the build's environment the wheel is a platform wheel instead,
tagged as setuptools and scikit-build-core tag one: ``sysconfig.get_platform()`` (which honours
CPython's ``_PYTHON_HOST_PLATFORM``), ``py3-none-linux_x86_64``."""

import base64
import hashlib
import os
import subprocess
import sysconfig
import zipfile

NAME, VERSION = "toyfp4", "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def get_requires_for_build_wheel(config_settings=None):
    return []


def _archs():
    text = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(",", ";").replace(" ", ";")
    return [a.strip() for a in text.split(";") if a.strip()]


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    nvcc = os.environ.get("CUDACXX") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    sms = []
    for i, arch in enumerate(_archs()):
        sm = "sm_" + arch.replace(".", "")
        print("[%d/%d] nvcc -cubin -arch=%s toy.cu" % (i + 1, len(_archs()), sm), flush=True)
        subprocess.run([nvcc, "-cubin", "-arch=" + sm, "-o", os.devnull, os.path.join(HERE, "toy.cu")], check=True)
        sms.append(sm)
    init = ("def hello():\n    return 'hello from toyfp4'\n\n\n"
            "def build_info():\n    return {'archs': %r}\n" % (sms,))
    dist = "%s-%s.dist-info" % (NAME, VERSION)
    tag, pure = "py3-none-any", "true"
    if os.environ.get("TOY_PLATFORM_WHEEL") == "1":
        tag, pure = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"), "false"
    files = {
        NAME + "/__init__.py": init,
        dist + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (NAME, VERSION),
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: toy_backend\nRoot-Is-Purelib: %s\nTag: %s\n" % (pure, tag),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(text.encode())))
    record.append(dist + "/RECORD,,")
    files[dist + "/RECORD"] = "\n".join(record) + "\n"
    name = "%s-%s-%s.whl" % (NAME, VERSION, tag)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for path, text in files.items():
            zi = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            zf.writestr(zi, text)
    return name
