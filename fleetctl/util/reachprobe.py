"""Whether a host reaches the repositories and archives its build would download: what CMake's
FetchContent does at configure time without a ``fetch_mirror`` (``git clone`` for
``GIT_REPOSITORY``, an HTTP(S) download for ``URL``; CMake's FetchContent/ExternalProject docs).
Stdlib only, Python 3.8+, no fleetctl import: the source runs on the host (``python3 -c``, the
venv's interpreter) as :data:`fleetctl.tasks.build_deps.REACH_PROGRAM`.

Each git URL is asked with ``git ls-remote <url> HEAD`` (the transport, proxy and credentials
git itself, and so CMake, would use; ``GIT_TERMINAL_PROMPT=0``: no prompt ever waits), each
archive URL with an HTTP ``HEAD`` request (urllib, which honours ``https_proxy`` as CMake's
download does; any HTTP answer, even 403 or 405, means the server is reachable); all at once, each within :data:`TIMEOUT_S` seconds.

Input: ``argv[1]``, a JSON list of ``[kind, url]`` (``kind`` ``"git"`` or ``"url"``). Output: a
JSON object ``{url: ""}`` for a reachable one, ``{url: "why not, one line"}`` otherwise.
"""

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

#: Seconds each repository or archive may take to answer (git's and urllib's own waits can be minutes).
TIMEOUT_S = 20


def _git(url):
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false", SSH_ASKPASS="/bin/false")
    try:
        res = subprocess.run(["git", "ls-remote", url, "HEAD"], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=TIMEOUT_S)
    except FileNotFoundError:
        return "git is not on the host's PATH (CMake's FetchContent clones with git)"
    except subprocess.TimeoutExpired:
        return "no answer within %d s" % TIMEOUT_S
    if res.returncode == 0:
        return ""
    lines = [ln.strip() for ln in res.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return "git ls-remote: " + (lines[-1] if lines else "rc=%d" % res.returncode)


def _url(url):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=TIMEOUT_S):
            return ""
    except urllib.error.HTTPError:
        return ""  # the server answered (some refuse HEAD: 403, 405): it is reachable
    except Exception as exc:  # noqa: BLE001 - any failure is the answer, one line
        return ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0]


def reach(items):
    """``{url: "" or why not}`` for each ``(kind, url)`` of ``items``, asked concurrently."""
    out = {}

    def one(kind, url):
        out[url] = _git(url) if kind == "git" else _url(url)

    threads = [threading.Thread(target=one, args=(kind, url)) for url, kind in {u: k for k, u in items}.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


if __name__ == "__main__":
    print(json.dumps(reach(json.loads(sys.argv[1]))))
