"""A minimal PEP 517 backend: nvcc -cubin of kern.cu against the installed torch's header, for each
arch in TORCH_CUDA_ARCH_LIST, then a pure-Python wheel recording the torch it was built against."""

import base64
import hashlib
import os
import subprocess
import zipfile

NAME, VERSION = "stagedk", "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    import torch  # the venv's torch: the build runs in the venv (no build isolation)

    include = os.path.join(os.path.dirname(torch.__file__), "include")
    nvcc = os.environ.get("CUDACXX") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    archs = [a.strip() for a in os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(",", ";").split(";") if a.strip()]
    sms = []
    for arch in archs:
        sm = "sm_" + arch.replace(".", "").replace("+PTX", "")
        print("nvcc -cubin -arch=%s kern.cu (torch %s)" % (sm, torch.__version__), flush=True)
        subprocess.run([nvcc, "-cubin", "-arch=" + sm, "-I", include, "-o", os.devnull,
                        os.path.join(HERE, "kern.cu")], check=True)
        sms.append(sm)
    init = ("def hello():\n    return 'hello from stagedk'\n\n\n"
            "def build_info():\n    return {'archs': %r, 'torch': %r}\n" % (sms, torch.__version__))
    dist = "%s-%s.dist-info" % (NAME, VERSION)
    files = {
        NAME + "/__init__.py": init,
        dist + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (NAME, VERSION),
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: stagedk_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(text.encode())))
    record.append(dist + "/RECORD,,")
    files[dist + "/RECORD"] = "\n".join(record) + "\n"
    name = "%s-%s-py3-none-any.whl" % (NAME, VERSION)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for path, text in files.items():
            zf.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), text)
    return name
