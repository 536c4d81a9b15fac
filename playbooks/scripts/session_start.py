"""The first command of a host's run, in ONE exec: folders, login shell, deploy lock, facts, probes.

fleetctl starts it as ``python3 -c BOOT`` (:data:`fleetctl.engine.session_start.BOOT`) and sends
this file's text, ``facts.py``'s (both zlib-compressed) and a job (JSON) on stdin, each block
after a line holding its size, so nothing is uploaded first and no other command runs before it. Standard library only, any Python >= 3.8. In order:

1. ``login``: ``$SHELL`` and ``$HOME`` (which parse and anchor every later command line);
2. ``run_dir``: the run's folder ``<workdir>/runs/<run_id>`` is created private to the user
   (``umask 077``, parents too), the workdir taken relative to the home folder unless absolute;
3. ``lock`` (a deploy): the deploy lock file is taken with ``flock(2)`` without waiting, exactly
   as :data:`fleetctl.engine.hostlock.LOCK_SCRIPT` does it (same file format: one line
   ``PID JSON``; a held lock is reported with its holder's record and nothing else is done);
4. ``facts``: ``facts.py`` runs in this process through its own ``main(ARGV)``, imported from
   ``<workdir>/scripts/facts-<sha>.py`` (see :func:`run_facts`), keeping the answers of the
   programs it asks (nvcc, compilers, cmake, ninja, the venv's interpreter) in
   ``<workdir>/state/facts-cache.json`` for the next run (used only while each program's files
   stat the same; the GPUs, the driver, memory and disk are read every time);
5. ``prune`` (a deploy, under its lock): the per-run folders ``<workdir>/runs/<run_id>`` past the
   retention policy (:mod:`fleetctl.util.retention`: the newest ``keep_runs`` kept, none older than
   ``keep_days`` days) are removed, never this run's nor one changed within the last hour (a
   ``verify`` or ``run`` takes no lock and may be using it); so are the build folders of
   ``<workdir>/tmp/`` (a build's TMPDIR with nvcc's ``tmpxft_*`` files and pip's build tree, left by
   a build that was killed: SIGTERM, a lost connection) whatever their age: every run that builds
   takes this deploy lock first (``PlayOptions.host_lock`` is on for every applying run), so under
   it no build of this workdir is running; their names are reported;
6. ``probes``: read-only commands the planners asked last time (argv, env, cwd), run beside the
   facts, each with its own deadline; an answer is the exit status, the signal and every byte of
   stdout and stderr, or nothing at all when the command could not start, ran past its deadline
   or printed more than the job allows (the engine then runs it itself, as always). Under the
   deploy lock, a probe that says which files its answer is read from (:data:`DEPS_MARK`) has
   its answer kept in ``<workdir>/state/probe-answers.json`` and given again while they are
   unchanged (:class:`KeptAnswers`).

A job marked ``read_only`` (``fleetctl facts``, which like Ansible's setup module must not change
a host) writes nothing on the host: no run folder (nor the workdir or its parents), no
``scripts/`` copy of ``facts.py`` (one a deploy left there is used; else a copy in a private
temporary folder of ``$TMPDIR``, removed before the result line: the NVML child runs it by path),
no bytecode cache, no id file, and the facts script's kept answers (``state/facts-cache.json``)
are read when a deploy left them but never written: a workdir that exists may be shared or
another user's, and "facts changed nothing" is a promise only when nothing at all is written
(``--read-only`` of facts.py). It takes no lock and answers no probes.

It prints ONE line, ``@@FLEETCTL_SESSION@@ JSON`` (login banners before it are ignored), then:
holding the deploy lock it waits until its stdin reaches EOF (the controller released it, or
the connection is gone: sshd closes the channel either way), clears the lock record and exits 0;
SIGTERM, SIGHUP and SIGINT do the same. Every :data:`LOCK_CHECK_S` seconds it reads the lock file:
once the file no longer names it (removed and made anew by another controller, rewritten), it
exits 4 leaving the file alone, so the controller sees the lock lost when the run ends (or before
it installs) and reads who holds it (fleetctl/engine/lockwatch.py). It does so as ``/bin/sh``
(:data:`HOLD`, exec'd in this process, so the recorded pid stays right), so a held lock costs a
shell, not an interpreter. Without the lock it exits 0 at once.

Stopping: a job marked ``watch_stdin`` (the controller keeps the stdin open after the job, with
heartbeats) has a thread read it to EOF, which comes when the controller is interrupted, times the
command out or is gone; then, and on SIGTERM, SIGHUP or SIGINT, the script kills its children with
their sessions (the facts' GPU commands and the probes run in sessions of their own, out of reach
of a stop sent to this process's group), clears the lock record when it holds the lock, and exits
(:func:`stop`). A command given stdin is not under fleetctl's supervisor
(fleetctl/connection/command.py), so this is its supervision.
"""

import base64
import errno
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zlib

MARK = "@@FLEETCTL_SESSION@@ "
WORKDIR = "\x00W"
#: The umask the login gave this process (probes run with it; this process's own files are 077).
LOGIN_UMASK = 0o022


def read_block(stream):
    """One length-prefixed block of stdin: a line holding the byte count, then the bytes."""
    n = int(stream.readline().strip() or 0)
    return stream.read(n) if n else b""


def resolve(path, home):
    """``path`` absolute as it is, ``~``/``~/x``/``x`` under ``home``."""
    if path in ("~", ""):
        return home
    if path.startswith("~/"):
        path = path[2:]
    return path if path.startswith("/") else os.path.join(home, path)


def _owner(uid):
    """A uid's user name (``uid N`` when the password database has none)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return "uid %d" % uid


def _described(path, st):
    return "%s (owner %s, mode %04o)" % (path, _owner(st.st_uid), stat.S_IMODE(st.st_mode))


def own_workdir(base, create=True):
    """``(workdir, None)``: the folder this login user works in for the workdir var's folder
    ``base`` (absolute); ``(None, line)`` when there is none it may use, the line naming the
    folder, its owner and mode, and what to do.

    One folder may be given to several login users of a host (two operators, ``ansible_user: alice``
    and ``bob``, root and a service user; a site-wide ``/opt/fleetctl`` or ``/scratch/fleetctl``).
    The rules are /tmp's, as Ansible's ``system_tmpdirs`` and systemd's tmpfiles.d use it (a
    shared folder is world-writable only with the sticky bit, which lets no user remove or rename
    another's entries: sticky(7) of Linux's ``unlink(2)``/``rename(2)``, ``EPERM``), and OpenSSH's
    ``StrictModes`` (a folder another user can change is never trusted):

    - ``base`` missing: it is made (parents too) private to this user (umask 077), and is the
      workdir (as before: a single user's layout does not change);
    - ``base`` this user's own, not world-writable: it is the workdir (unchanged);
    - ``base`` a shared base, world-writable with the sticky bit (``chmod 1777``, as /tmp), or
      another user's folder: the workdir is ``base/<user>``, this user's own (made mode 0700 in a
      shared base; in another's folder only when made beforehand, e.g. by an administrator);
      one that is a symbolic link, not a folder, another user's or writable by others is never
      used (another user could have made it to be written through: a symlink or TOCTOU attack);
    - ``base`` world-writable without the sticky bit, or a symbolic link owned by another user
      than this one and root: never used (another user could swap its folders).

    ``create`` false (``fleetctl facts``, read only): nothing is made; ``base/<user>`` is named
    even when missing.
    """
    uid = os.geteuid()
    try:
        st = os.lstat(base)
    except FileNotFoundError:
        if create:
            os.makedirs(base, exist_ok=True)
        return base, None
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid not in (uid, 0):
            return None, ("workdir %s is a symbolic link owned by %s: never followed (another user could point it "
                          "anywhere); set the workdir var to a folder of your own" % (base, _owner(st.st_uid)))
        try:
            st = os.stat(base)
        except OSError:
            return base, None  # a dangling link: making the run folder says why
    if not stat.S_ISDIR(st.st_mode):
        return base, None  # making the run folder says why (Not a directory)
    mode = stat.S_IMODE(st.st_mode)
    shared = bool(mode & stat.S_ISVTX) and bool(mode & 0o002)
    if mode & 0o002 and not shared:
        return None, ("workdir %s is writable by every user without the sticky bit: never used (another user could "
                      "replace its folders); chmod 1777 it to share it (each user then works in its own "
                      "%s/<user>, as in /tmp) or chmod 0700 it" % (_described(base, st), base))
    if st.st_uid == uid and not shared:
        return base, None
    me = _owner(uid)
    mine = os.path.join(base, me)
    not_mine = ("workdir %s is %s's, not %s's: %s cannot work in it; set the workdir var to a folder of %s's own, "
                "or share it: chmod 1777 %s (each user then works in its own %s/<user>, as in /tmp), or make %s "
                "owned by %s, mode 0700" % (_described(base, st), _owner(st.st_uid), me, me, me, base, base, mine, me))
    try:
        own = os.lstat(mine)
    except FileNotFoundError:
        if not create:
            return mine, None
        if not shared:
            return None, not_mine
        try:
            os.mkdir(mine, 0o700)
            return mine, None
        except FileExistsError:  # made a moment ago: checked below like any other
            own = os.lstat(mine)
        except OSError as exc:
            return None, ("workdir %s: %s cannot make its own folder %s in it: %s"
                          % (_described(base, st), me, mine, exc.strerror or exc))
    except OSError:  # another user's private folder (EACCES): nothing of ours can be in it
        return (mine, None) if not create else (None, not_mine)
    if not stat.S_ISDIR(own.st_mode) or own.st_uid != uid or stat.S_IMODE(own.st_mode) & 0o022:
        kind = "a symbolic link" if stat.S_ISLNK(own.st_mode) else "not a folder" if not stat.S_ISDIR(
            own.st_mode) else "writable by others" if own.st_uid == uid else "not %s's" % me
        return None, ("workdir %s in the shared %s is %s: never used (another user could have made it to be written "
                      "through); remove it, or set the workdir var to a folder of %s's own"
                      % (_described(mine, own), base, kind, me))
    return mine, None


#: The fix of a workdir that cannot take this run's files (fleetctl/facts/workdir.py WORKDIR_FIX).
WORKDIR_FIX = "set the host var %s to a writable folder with space"


class WorkdirUnwritable(Exception):
    """A file or folder under the workdir could not be written: ``args[0]`` is its line (:func:`cannot_write`)."""


def cause(exc):
    """``"No space left on device (ENOSPC)"``: an OSError's words and its errno name."""
    text = exc.strerror or str(exc)
    return "%s (%s)" % (text, errno.errorcode[exc.errno]) if exc.errno in errno.errorcode else text


def write_fix(exc, var="workdir"):
    """``"; set the host var VAR to ..."`` when ``exc`` says the file system cannot take files at
    all (read-only, full, over quota), else ``""`` (other causes have lines of their own)."""
    if exc.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT):
        return "; " + WORKDIR_FIX % var
    return ""


def cannot_write(what, path, exc, var="workdir"):
    """The one rule for every "cannot write the workdir" line (the run folder, the facts script's
    copy, the deploy lock): ``"cannot WHAT PATH: CAUSE (ENAME)"`` and, for a read-only, full or
    over-quota file system, the fix naming the host var (``deploy_lock`` when that var put the lock
    elsewhere)."""
    return "cannot %s %s: %s%s" % (what, path, cause(exc), write_fix(exc, var))


def lock_refusal(path, exc):
    """What a lock file that cannot be opened is, for the line saying so: ``": PATH (owner, mode)
    is ...; what to do"``, or ``""`` when that says nothing more (a full disk, a missing folder)."""
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.ELOOP):
        return ""
    me = _owner(os.geteuid())
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        return (": %s is a symbolic link (owner %s): never followed (it could point to any file of %s's, "
                "which taking the lock would truncate); remove it, or set deploy_lock to a file of its own"
                % (path, _owner(st.st_uid), me))
    if st is not None:
        return (": %s is %s's and %s cannot write it; to share one lock among the users that deploy here, "
                "make it writable by each (chmod 0666 %s, or 0660 and a group of theirs), else leave deploy_lock "
                "unset (each user then has its own, in its workdir)" % (_described(path, st), _owner(st.st_uid),
                                                                         me, path))
    folder = os.path.dirname(path)
    try:
        return ": %s cannot make it in %s" % (me, _described(folder, os.stat(folder)))
    except OSError:
        return ""


#: Reads of a busy lock's record, 50 ms apart, before it is reported as it stands (1 s at most).
BUSY_READS = 20


def take_lock(path, record):
    """``(fd, info)``: the lock held (``fd``) and ``{"path", "locked": pid, "previous": text}``, or
    ``(None, {"path", "busy": text})`` when another process holds it."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    # never through a symbolic link (another user's in a shared folder would have this run truncate
    # whatever it points to); a file another user made, writable by this one, is one lock for both,
    # opened without O_CREAT: Linux's fs.protected_regular refuses O_CREAT on another user's file
    # in a sticky world-writable folder even when its mode allows writing (proc_sys_fs(5))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except PermissionError:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        # the holder writes its record just after its flock: read until two reads 50 ms apart agree
        # on a record, so a holder between its flock and its write is never taken for a process
        # that left none, nor for the run before it (its record is still there until truncated)
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        for _ in range(BUSY_READS):
            time.sleep(0.05)
            again = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            if again == text and text.strip():
                break
            text = again
        os.close(fd)
        return None, {"path": path, "busy": text}
    previous = os.pread(fd, 4096, 0).decode("utf-8", "replace")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, ("%d %s\n" % (os.getpid(), record)).encode("utf-8"), 0)
    except OSError:  # a full disk (ENOSPC): not held, the caller names the path and the cause
        os.close(fd)
        raise
    return fd, {"path": path, "locked": os.getpid(), "previous": previous}


#: The host's own state under the workdir, and in it the facts script's kept answers (``--cache``:
#: the version commands of programs unchanged since the last run, facts.py's AnswerCache).
STATE = "state"
FACTS_CACHE = "facts-cache.json"
PROBE_ANSWERS = "probe-answers.json"
RUN_ID = "%Y%m%dT%H%M%S"
BUSY_S = 3600


def run_started(name):
    """The UTC start (epoch seconds) a run folder's name begins with (:data:`RUN_ID`,
    ``20261205T105034.706Z-7f1e77``); ValueError for a name fleetctl did not make."""
    import datetime  # not time.strptime: it imports _strptime, calendar, locale and re

    t = name.split(".", 1)[0]
    if len(t) != 15 or t[8] != "T" or not (t[:8] + t[9:]).isascii() or not (t[:8] + t[9:]).isdigit():
        raise ValueError("not a run folder: %r" % name)
    return datetime.datetime(int(t[:4]), int(t[4:6]), int(t[6:8]), int(t[9:11]), int(t[11:13]), int(t[13:]),
                             tzinfo=datetime.timezone.utc).timestamp()


def prune_runs(runs_dir, current, keep_runs, keep_days, now):
    """Remove run folders of ``runs_dir`` past the policy (see the module docstring); their names."""
    try:
        names = sorted((n for n in os.listdir(runs_dir) if n != current and not n.startswith(".")), reverse=True)
    except OSError:
        return []
    removed = []
    for i, name in enumerate(names, start=1):  # this run is the newest, kept: the others from 1
        path = os.path.join(runs_dir, name)
        try:
            st = os.lstat(path)
            started = run_started(name)
        except (OSError, ValueError):
            continue  # not a run folder fleetctl made
        if not os.path.isdir(path) or os.path.islink(path) or now - st.st_mtime < BUSY_S:
            continue
        if i >= keep_runs or now - started > keep_days * 86400:
            import shutil  # here, not above: shutil, calendar and time.strptime cost a no-change deploy ~4 ms a host

            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


def prune_tmp(tmp_dir):
    """Remove the build folders of ``tmp_dir`` (called only under the deploy lock: they belong to
    builds no longer running, however recent); their names. A symbolic link is left alone."""
    import shutil

    removed = []
    try:
        names = sorted(os.listdir(tmp_dir))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(tmp_dir, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


def fill(probe, workdir):
    """A remembered probe with the workdir token (NUL W) replaced by this host's workdir."""
    def sub(value):
        return value.replace(WORKDIR, workdir.rstrip("/")) if isinstance(value, str) else value

    return {"argv": [sub(a) for a in probe["argv"]], "env": {k: sub(v) for k, v in (probe.get("env") or {}).items()},
            "cwd": sub(probe.get("cwd")), "timeout_s": probe.get("timeout_s")}


#: What a probe that can say what its answer is read from prints on stderr when asked to
#: (``FLEETCTL_PROBE_DEPS=1``): ``[[path, stat], ...]`` (the install-state probe of
#: fleetctl/tasks/venv_state.py), stat as :func:`file_stat` makes it.
DEPS_MARK = b"@@FLEETCTL_DEPS@@ "
#: Seconds a dependency must be older than an answer for it to be kept (as facts.py's RACY_S: a
#: file system's timestamps may be a second or two coarse, git's racy-git problem).
RACY_S = 2.0
#: The same for a file whose mtime or ctime has a sub-second part (facts.py's FINE_RACY_S: a file
#: system finer than a second, stamped from the coarse clock, one tick >= 10 ms).
FINE_RACY_S = 0.05


def file_stat(path):
    """``[size, mtime_ns, ctime_ns, inode, device, mode]`` of ``path``, None when absent."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_mode]


class KeptAnswers:
    """Answers of probes that said what they are read from (:data:`DEPS_MARK`), kept in
    ``<workdir>/state/probe-answers.json`` between runs and given again only while every one of
    those files and folders stats the same (a package installed, removed or upgraded renames a
    folder entry of sys.path and changes that folder's mtime; a record rewritten changes its own
    stat); an answer about a file changed within :data:`RACY_S` seconds (:data:`FINE_RACY_S` where its
    times are finer than a second), or of a probe that did not
    exit 0, is not kept. One host's (hostname and /etc/machine-id), keyed by the probe's argv,
    environment and folder (a new fleetctl's probe text is another key)."""

    def __init__(self, path, min_age_s=None):
        self.path, self.used, self.dirty, self.lock, self.kept = path, {}, False, threading.Lock(), 0
        self.min_age_s = RACY_S if min_age_s is None else float(min_age_s)
        self.fixed_age = min_age_s is not None  # given: one window for every file
        self.header = {"version": 1, "hostname": os.uname().nodename, "machine_id": _machine_id()}
        self.entries = {}
        try:
            with open(path) as fh:
                doc = json.load(fh)
            if isinstance(doc, dict) and all(doc.get(k) == v for k, v in self.header.items()):
                self.entries = doc.get("entries") or {}
        except (OSError, ValueError):
            pass

    @staticmethod
    def key(probe):
        import hashlib

        text = json.dumps([probe["argv"], sorted((probe.get("env") or {}).items(), key=lambda kv: kv[0]),
                           probe.get("cwd")])
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()

    def get(self, key):
        entry = self.entries.get(key)
        try:
            if entry is None or any(file_stat(p) != st for p, st in entry["deps"]):
                return None
        except (TypeError, ValueError, KeyError):
            return None
        with self.lock:
            self.used[key] = entry
            self.kept += 1
        return dict(entry["answer"], s=0.0, kept=True)

    def put(self, key, deps, answer):
        now_ns = time.time_ns()
        for _, st in deps:
            if st is None:
                continue
            fine = not self.fixed_age and (st[1] % 10**9 or st[2] % 10**9)
            if now_ns - max(st[1], st[2]) < (FINE_RACY_S if fine else self.min_age_s) * 1e9:
                return
        with self.lock:
            self.used[key] = {"deps": deps, "answer": answer}
            self.dirty = True

    def save(self):
        if not self.dirty and set(self.used) == set(self.entries):
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = "%s.%d.part" % (self.path, os.getpid())
            with open(tmp, "w") as fh:
                json.dump(dict(self.header, entries=self.used), fh)
            os.replace(tmp, self.path)
        except OSError:
            pass


def _machine_id():
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):  # machine-id(5)
        try:
            with open(path) as fh:
                return fh.read().strip() or None
        except OSError:
            pass


def _split_deps(err):
    """``(stderr without the deps line, the deps or None)``."""
    at = err.rfind(DEPS_MARK)
    if at < 0 or (at > 0 and err[at - 1:at] != b"\n"):
        return err, None
    end = err.find(b"\n", at)
    end = len(err) if end < 0 else end + 1
    try:
        deps = json.loads(err[at + len(DEPS_MARK):end].decode("utf-8", "surrogateescape"))
    except ValueError:
        return err, None
    return err[:at] + err[end:], deps if isinstance(deps, list) else None


def run_probe(probe, limit, kept=None):
    """Run one probe; its answer, or ``None`` when it must be asked again by the engine. With
    ``kept`` (:class:`KeptAnswers`), an answer kept from an earlier run whose files are unchanged
    is given instead, and a probe that says what it read (:data:`DEPS_MARK`) has its answer kept."""
    kept_key = None
    if kept is not None:
        kept_key = kept.key(probe)
        got = kept.get(kept_key)
        if got is not None:
            return got
    env = dict(os.environ)
    for key, value in (probe.get("env") or {}).items():
        if value is None:  # the step unsets it (fleetctl's Connection: env None = unset)
            env.pop(key, None)
        else:
            env[key] = value
    if kept is not None:
        env["FLEETCTL_PROBE_DEPS"] = "1"
    cwd = probe.get("cwd")
    if cwd and not os.path.isdir(cwd):
        return None
    started = time.time()
    # the login's umask, not this process's 077: a probe runs as the engine would run it (a venv
    # probe importing torch may write __pycache__ folders others must read)
    extra = {"umask": LOGIN_UMASK} if sys.version_info >= (3, 9) else {}
    try:
        proc = subprocess.Popen(probe["argv"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd=cwd or None, start_new_session=True, **extra)
    except (OSError, ValueError):
        return None
    try:
        out, err = proc.communicate(timeout=probe.get("timeout_s") or 120)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return None
    err, deps = _split_deps(err) if kept is not None else (err, None)
    if len(out) > limit or len(err) > limit:
        return None
    rc, sig = proc.returncode, None
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name[3:]
        except ValueError:
            sig = str(-rc)
        rc = None
    answer = {"rc": rc, "signal": sig, "out": base64.b64encode(out).decode("ascii"),
              "err": base64.b64encode(err).decode("ascii"), "s": round(time.time() - started, 4)}
    if deps and rc == 0:
        kept.put(kept_key, deps, answer)
    return answer


def run_facts(source, folder, argv, read_only=False):
    """Run ``facts.py``'s ``main(argv)`` in this process; its stdout as text.

    The script is kept as ``<folder>/facts-<sha256 of it, 16 digits>.py`` and imported from there,
    so Python's own bytecode cache (``__pycache__``, checked against the file's size and mtime)
    spares every later run the compile (a fifth of the facts' CPU); its NVML child runs it again
    by that path. ``read_only``: nothing is written in ``folder`` (see the module docstring).
    This copy (a deploy, its ``--plan`` and ``--dry-run``) is what the facts write in the workdir
    besides ``facts.py``'s own id file and kept answers (which report their own failures): when it
    cannot be written, :class:`WorkdirUnwritable` says where and the fix (:func:`cannot_write`).
    """
    import hashlib

    path = os.path.join(folder or "", "facts-%s.py" % hashlib.sha256(source).hexdigest()[:16])
    scratch = None
    if read_only:
        sys.dont_write_bytecode = True
        if folder is None or not os.path.isfile(path):  # None: a workdir that may not be used
            import tempfile

            scratch = tempfile.mkdtemp(prefix="fleetctl-facts-")
            SCRATCH.append(scratch)  # a stop (os._exit: no finally runs) removes it too
            path = os.path.join(scratch, os.path.basename(path))
            with open(path, "wb") as fh:
                fh.write(source)
    try:
        return _import_and_run(path, source, folder, argv)
    finally:
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)


def _import_and_run(path, source, folder, argv):
    import importlib.util
    import io

    if not os.path.exists(path):
        tmp = "%s.%d.part" % (path, os.getpid())
        try:
            os.makedirs(folder, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(source)
            os.replace(tmp, path)
        except OSError as exc:  # a full disk: write(2) names no file ("[Errno 28] No space left on device")
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise WorkdirUnwritable(cannot_write("write", path, exc)) from None
    spec = importlib.util.spec_from_file_location("fleetctl_facts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        module.main(argv)
        return sys.stdout.getvalue()
    finally:
        sys.stdout = saved


def stop_children():
    """Kill (SIGKILL) every child of this process with its whole process group, and the rest of
    this process's own group (itself excepted). The facts' GPU commands and the probes run in
    sessions of their own (``start_new_session``: a timed-out wrapper's children go with it), so
    the stop that reaches this process's group (the controller interrupted: its supervisor's TERM,
    the channel's EOF) does not reach them; this is how it does (operator trial: a hung
    ``nvidia-smi`` left running under init after Ctrl-C). Children are found in ``/proc``
    (``ppid`` and ``pgrp`` fields of ``/proc/PID/stat``, proc(5)); without ``/proc``, none are."""
    me, own = os.getpid(), os.getpgrp()
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            ppid, pgrp = int(fields[1]), int(fields[2])  # fields: state, ppid, pgrp, session
        except (OSError, IndexError, ValueError):
            continue
        pid = int(name)
        try:
            if ppid == me and pgrp == pid:  # a child leading its own group (session): all of it
                os.killpg(pid, signal.SIGKILL)
            elif ppid == me or (own == me and pgrp == own):  # a child, or a member of this group
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


#: The deploy lock's file descriptor while this process holds it (cleared on a stop).
HELD = []
#: Scratch folders this process made (a read-only run's copy of the facts script), removed on a stop.
SCRATCH = []


def stop(code):
    """End now: the children stopped (:func:`stop_children`), the lock record cleared when held."""
    stop_children()
    for fd in HELD:
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
    if SCRATCH:
        import shutil

        for folder in SCRATCH:
            shutil.rmtree(folder, ignore_errors=True)
    os._exit(code)


def watch_stdin():
    """Read stdin (the controller's heartbeats after the job) until EOF, then :func:`stop`: the
    controller closes it when it is interrupted or times the command out, or the connection is
    gone (sshd closes the channel). A daemon thread, for a job marked ``watch_stdin``; it reads
    fd 0 itself (a daemon thread blocked in ``sys.stdin.buffer`` would hold its lock at exit)."""
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    stop(143)


def main():
    stdin = sys.stdin.buffer
    facts_source = read_block(stdin)
    job = json.loads(read_block(stdin).decode("utf-8"))
    started = time.time()
    try:
        os.setsid()  # its own process group: a stale holder is stopped with kill -TERM -- -PID
    except OSError:
        pass
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # the children are stopped too
        signal.signal(sig, lambda num, _frame: stop(128 + num))
    if job.get("watch_stdin"):  # the stdin stays open until the controller lets go (or is gone)
        threading.Thread(target=watch_stdin, daemon=True).start()
    home = os.environ.get("HOME", "")
    out = {"login": {"shell": os.environ.get("SHELL", ""), "home": home,
                     "home_missing": not (home and os.path.isdir(home))}}
    global LOGIN_UMASK
    LOGIN_UMASK = os.umask(0o077)
    base = os.path.normpath(resolve(job["workdir"], home))
    read_only = bool(job.get("read_only"))
    try:
        workdir, refused = own_workdir(base, create=not read_only)
    except OSError:
        workdir, refused = base, None  # cannot be made: said below, naming the run folder
    trusted = refused is None  # read only: nothing is read from a folder that may not be used
    workdir = workdir or base
    run_dir = os.path.join(workdir, "runs", job["run_id"])
    out["workdir"], out["run_dir"] = workdir, run_dir
    if refused and not read_only:
        out["error"] = refused
        return finish(out, None)
    try:
        if not read_only:
            os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:
        out["error"] = cannot_write("create", run_dir, exc)
        return finish(out, None)
    fd = None
    if job.get("lock"):
        where = job["lock"].get("path")  # the deploy_lock var (home-relative), else in the workdir
        path = resolve(where, home) if where else os.path.join(workdir, "deploy.lock")
        try:
            fd, out["lock"] = take_lock(path, job["lock"]["record"])
        except OSError as exc:
            # the path taken, not the var (empty without deploy_lock: "cannot take the deploy lock :")
            out["lock"] = {"path": path, "error": cause(exc) + lock_refusal(path, exc)
                           + write_fix(exc, "deploy_lock" if where else "workdir")}
            return finish(out, None)
        if fd is None:
            return finish(out, None)
    if fd is not None:
        HELD.append(fd)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda *_: stop(0))
    if fd is not None and job.get("prune"):
        policy = job["prune"]
        out["pruned"] = prune_runs(os.path.join(workdir, "runs"), job["run_id"], int(policy["keep_runs"]),
                                   float(policy["keep_days"]), time.time())
        out["pruned_tmp"] = prune_tmp(os.path.join(workdir, "tmp"))
    probes = [fill(p, workdir) for p in job.get("probes") or []]
    answers = [None] * len(probes)
    limit = int(job.get("probe_limit_bytes") or 4 << 20)
    kept = KeptAnswers(os.path.join(workdir, STATE, PROBE_ANSWERS), job.get("kept_min_age_s")) \
        if probes and fd is not None else None  # under the deploy lock: one run at a time writes the file

    def worker(indexes):
        for i in indexes:
            try:
                answers[i] = run_probe(probes[i], limit, kept)
            except Exception:  # noqa: BLE001 - unanswered: the engine asks it itself
                answers[i] = None

    lanes = max(1, min(4, len(probes)))
    threads = [threading.Thread(target=worker, args=(range(k, len(probes), lanes),), daemon=True)
               for k in range(lanes)] if probes else []
    for t in threads:
        t.start()
    if job.get("facts"):
        try:
            cache = ["--cache", os.path.join(workdir, STATE, FACTS_CACHE)] if trusted else []
            out["facts_stdout"] = run_facts(zlib.decompress(facts_source),
                                            os.path.join(workdir, "scripts") if trusted else None,
                                            ["--workdir", run_dir] + cache + (["--read-only", "1"] if read_only else [])
                                            + list(job.get("facts_argv") or []), read_only)
        except WorkdirUnwritable as exc:  # the workdir's file system, not the facts: the run folder's rule
            out["error"] = exc.args[0]
        except BaseException as exc:  # noqa: BLE001 - reported, never fatal
            out["facts_error"] = "%s: %s" % (type(exc).__name__, exc)
    for t in threads:
        t.join()
    if kept is not None:
        kept.save()
        out["kept"] = kept.kept
    out["probes"] = answers
    out["duration_s"] = round(time.time() - started, 3)
    return finish(out, fd, (out.get("lock") or {}).get("path"), (job.get("lock") or {}).get("lifeline_s") or 0)


#: Seconds between the lock holder's reads of the lock file (does it still name this process?).
LOCK_CHECK_S = 3

#: What holds the lock after the result line, in this process (exec keeps the pid the record
#: names): ``sh`` whose reader child waits for stdin's EOF and then sends it TERM; on TERM (HUP,
#: INT) it clears the record while the file names it, and exits 0. Every LOCK_CHECK_S seconds it
#: reads the file and exits 4 once the file names another process (or none): the lock was taken
#: from it. ``wait`` returns at once on a trapped signal (POSIX XCU 2.11), so a release is never
#: delayed by the sleep. The lock stays held by fd 9 (flock belongs to the open file, shared
#: across exec); the children close it. A Python process would keep ten times the memory for the
#: whole run on every host. (fleetctl/engine/hostlock.py's LOCK_SCRIPT checks the same way.)
#: With a lifeline of ``$2`` seconds (> 0) the reader also sends TERM once no heartbeat byte came
#: for that long (the controller cut off from the host: fleetctl/connection/lifeline.py), as the
#: supervisor of fleetctl/connection/command.py does; ``timeout(1)`` reads each byte.
HOLD = ('f=$1; l=$2; me=$$; ours() { read -r p r < "$f" 2>/dev/null && [ "$p" = "$me" ]; }; '
        'trap \'kill "$w" 2>/dev/null; ours && : > "$f"; exit 0\' TERM HUP INT; exec 3<&0; '
        '( if [ "$l" -gt 0 ] && command -v timeout >/dev/null 2>&1; then '
        'while [ -n "$(timeout "$l" dd bs=1 count=1 2>/dev/null)" ]; do :; done; '
        'else while read -r _; do :; done; fi; kill -TERM "$me" ) <&3 3<&- 9>&- & w=$!; '
        'while :; do sleep %d 9>&- & wait $!; ours || { kill "$w" 2>/dev/null; exit 4; }; done' % LOCK_CHECK_S)


def finish(out, fd, path=None, lifeline_s=0):
    """Print the one result line; holding the lock, become the holder (:data:`HOLD`)."""
    sys.stdout.write(MARK + json.dumps(out) + "\n")
    sys.stdout.flush()
    if fd is None:
        return 0
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing more reaches the channel: a write to a closed one must not kill us
    os.dup2(devnull, 2)
    os.dup2(fd, 9)
    os.set_inheritable(9, True)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execv("/bin/sh", ["sh", "-c", HOLD, "fleetctl-lock", path, str(int(lifeline_s))])
    except OSError:  # no /bin/sh: hold the lock from here
        pass
    try:
        while os.read(0, 65536):
            pass
    finally:
        os.ftruncate(fd, 0)
    return 0


sys.exit(main())
