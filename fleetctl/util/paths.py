"""Where fleetctl finds and keeps its own files.

Two kinds of place:

- the checkout it runs from (README installs with ``pip install -e .``): default playbooks and
  the embedded inventory (:func:`resolve_default`);
- the user's own folders, never the working directory, so that a run started from any folder (a
  person in their checkout, the nightly timer in ``/srv/fleet``) sees the same run records, retry
  set and controller-side locks:

  - state (run records, the retry set, controller-side locks): ``$FLEETCTL_HOME`` when set (an
    absolute path or ``~/...``; a relative one is refused: :func:`fleetctl_home`), else
    ``$XDG_STATE_HOME/fleetctl``, else ``~/.local/state/fleetctl`` (the XDG Base Directory
    specification's place for state that persists between runs but is not worth backing up);
  - cache (the wheel cache of arch classes): ``$XDG_CACHE_HOME/fleetctl``, else
    ``~/.cache/fleetctl`` (``FLEETCTL_HOME`` moves state, not the cache: docs/contracts.md, "Run record").

Relative or empty ``XDG_*`` values are ignored, as the XDG specification says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The inventory used when none is given (no ``-i``, no ``FLEETCTL_INVENTORY``, ``Fleet()``).
DEFAULT_INVENTORY = "inventory.yaml"


def resolve_default(path: str | Path) -> Path:
    """``path`` as given if it exists (relative to the current folder), else relative to the checkout.

    So ``fleetctl deploy`` finds ``playbooks/fp4-kernels.yaml`` and ``inventory.yaml`` from any folder.
    """
    p = Path(path).expanduser()
    if p.exists() or p.is_absolute():
        return p
    alt = REPO_ROOT / p
    return alt if alt.exists() else p


def default_inventory_note() -> str | None:
    """The warning for a default inventory that falls back to the checkout's ``inventory.yaml``
    (nothing given, and the current folder holds none), else None. An operator is told, as Ansible
    warns "No inventory was parsed" rather than run quietly on an inventory nobody named: this one's
    ``localhost`` is the controller and ``gpu-nodes`` an example fleet."""
    if Path(DEFAULT_INVENTORY).exists():
        return None
    alt = REPO_ROOT / DEFAULT_INVENTORY
    if not alt.exists():
        return None
    return (f"no inventory given (-i or FLEETCTL_INVENTORY) and no {DEFAULT_INVENTORY} in {os.getcwd()}: "
            f"using fleetctl's embedded default {alt} (its 'local' group is this machine; 'gpu-nodes' is an "
            f"example fleet)")


def inventory_sources(sources: Sequence[str | os.PathLike[str]] | None) -> list[str]:
    """The inventory sources to load: ``sources`` as given (``~`` expanded; a path that is not
    there stays as given, so that loading it fails naming it), or, when None or empty (no ``-i``, no
    ``FLEETCTL_INVENTORY``), the default ``inventory.yaml``: the current folder's, else the
    checkout's (:func:`resolve_default`). Only the default falls back to the checkout: an explicit
    ``-i inventory.yaml`` typed in the wrong folder must never become fleetctl's example inventory
    (whose ``localhost`` is this controller)."""
    if not sources:
        return [str(resolve_default(DEFAULT_INVENTORY))]
    return [os.path.expanduser(os.fspath(s)) for s in sources]


def _xdg(name: str, default: str) -> Path:
    value = os.environ.get(name, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path(os.path.expanduser("~")) / default


def fleetctl_home(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$FLEETCTL_HOME`` (``~`` expanded) when set, else None. ``environ`` defaults to ``os.environ``.

    A relative value is refused, not resolved: state belongs to the user, not to the folder a
    command starts in (the module docstring), and ``FLEETCTL_HOME=state`` would give each folder
    (a person's checkout, the nightly timer's ``/srv/fleet``) its own run records, retry set and
    locks, so two deploys from two folders would not see each other's controller-side locks and
    ``fleetctl runs`` would list another set in each. Resolving it once against the current
    folder would only hide that; the refusal names the absolute path to give instead. (Relative
    ``XDG_*`` values are ignored rather than refused, as the XDG specification says.)

    Raises:
        InputError: a relative path, or set but empty (one line naming the variable and its value, exit 2).
    """
    from ..errors import InputError

    home = (os.environ if environ is None else environ).get("FLEETCTL_HOME")
    if home is None:
        return None
    if not home.strip():  # FLEETCTL_HOME="" chose the default folder silently (util.envvars)
        raise InputError("FLEETCTL_HOME: set but empty: unset it to keep state in $XDG_STATE_HOME/fleetctl "
                         "(default ~/.local/state/fleetctl), or give an absolute folder")
    path = os.path.expanduser(home)
    if not os.path.isabs(path):
        raise InputError(f"FLEETCTL_HOME: want an absolute path (or ~/...), got {home!r}: a relative one puts run "
                         f"records, the retry set and locks in whichever folder fleetctl starts in; give "
                         f"{os.path.abspath(path)!r} for this folder's")
    return Path(path)


def state_dir() -> Path:
    """The user's fleetctl state folder (see the module docstring); not created here.

    Raises:
        InputError: a relative ``FLEETCTL_HOME`` (:func:`fleetctl_home`).
    """
    home = fleetctl_home()
    if home is not None:
        return home
    return _xdg("XDG_STATE_HOME", ".local/state") / "fleetctl"


def state_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that chose :func:`state_dir`, as the user set them (made absolute):
    ``FLEETCTL_HOME`` when set, else an absolute ``XDG_STATE_HOME``; empty when the default
    (``~/.local/state/fleetctl``) applies. What a job started elsewhere (a timer, cron) must carry
    to keep its runs where this user's interactive runs are, and nothing more. ``environ``
    defaults to ``os.environ``.

    Raises:
        InputError: a relative ``FLEETCTL_HOME`` (:func:`fleetctl_home`).
    """
    env = os.environ if environ is None else environ
    home = fleetctl_home(env)
    if home is not None:
        return {"FLEETCTL_HOME": os.path.normpath(home)}
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return {"XDG_STATE_HOME": xdg}
    return {}


def cache_dir() -> Path:
    """The user's fleetctl cache folder (see the module docstring); not created here."""
    return _xdg("XDG_CACHE_HOME", ".cache") / "fleetctl"


def runs_dir() -> Path:
    """``<state>/runs``: one folder per run (``run.json``, ``events.jsonl``, ``logs/``) and the retry set."""
    return state_dir() / "runs"


def locks_dir() -> Path:
    """``<state>/locks``: the controller-side per-host deploy locks of this user."""
    return state_dir() / "locks"


def _kept(c: str) -> bool:
    """True for a character a host's name keeps as it is in a file name: a letter, a digit, ``-_.[]``."""
    return c.isalnum() or c in "-_.[]"


def safe_name(host: str) -> str:
    """A host name as one file name, the one rule wherever a host's name becomes a path part on
    the controller or a host (a host's log ``logs/<safe_name>.log``, fetch's ``DEST/<host>/`` and
    ``{host}``, copy's ``{host}``, a controller cache or scratch folder; the default workdir through
    :func:`host_folder`). One-to-one: two host names never share a file (operator trial: ``a@b``
    and ``a_b`` once both became ``logs/a_b.log``, each host's lines in one file).

    - A name of letters, digits and ``-_.[]`` alone is its own file name (``gpu01``, ``a_b``,
      ``node[01]``, ``...``): the files of earlier runs stay where they are.
    - Any other name has each other character written as ``%XX``, one per byte of its UTF-8
      (RFC 3986 percent-encoding, upper-case hex; ``%`` itself is ``%25``): ``a@b`` -> ``a%40b``,
      ``x/y`` -> ``x%2Fy`` (so ``/`` never splits it); a name of dots alone, which path resolution
      reads as a folder (``.`` this one, ``..`` its parent: path_resolution(7)), has its dots
      written so too (``..`` -> ``%2E%2E``: an inventory may name a host ``..``, Ansible takes any
      name, and a path built from it must never leave the folder it is put under); the empty name
      is ``%``.

    Why no two names meet: a name of the first kind has no ``%``, every name of the second has one,
    and the second kind's names are read back one way (each ``%XX`` is a byte, anything else itself).
    A lone surrogate (an undecodable byte of a file name, PEP 383) is written as its
    ``surrogatepass`` bytes, which no real character's UTF-8 is.
    """
    if host and host not in (".", "..") and all(_kept(c) for c in host):
        return host
    if not host:
        return "%"
    dots = host in (".", "..")
    return "".join(c if _kept(c) and not dots else
                   "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")) for c in host)


def host_of(part: str) -> str:
    """The host name :func:`safe_name` made the file name ``part`` from (``a%40b`` -> ``a@b``,
    ``gpu01`` -> ``gpu01``); ``part`` itself when no host name makes it (a file some older
    fleetctl named, ``a_b`` for ``a@b``), so a file is always named by something."""
    from urllib.parse import unquote_to_bytes

    if "%" not in part:
        return part
    try:
        host = "" if part == "%" else unquote_to_bytes(part).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return part
    return host if safe_name(host) == part else part


def host_folder(host: str) -> str:
    """A host name as one folder name on the host (the default workdir ``~/.fleetctl/<host>``):
    the name itself when it is one usable path component without ``%``, so that the folder of a
    host named ``gpu01`` or ``node:7`` stays where earlier runs put it, else :func:`safe_name` (a
    name holding ``/``, ``%``, NUL, ``.``, ``..``, empty): ``.fleetctl/..`` is the home folder
    itself and ``.fleetctl/a/../../b`` a folder beside it. One-to-one as :func:`safe_name` is: a
    name kept has no ``%`` and every name :func:`safe_name` changes gets one (``x/y`` -> ``x%2Fy``,
    never the folder of a host named ``x_y``; ``50%`` -> ``50%25``)."""
    usable = host and not any(c in host for c in "/%\x00") and host not in (".", "..")
    return host if usable else safe_name(host)


def keep_mode(path, mode: int) -> None:
    """Give a fetched file ``path`` the host file's permission bits ``mode`` less this process's
    umask, as ``scp`` and ``cp`` make new files (an executable stays executable).

    Raises:
        OSError: the chmod failed.
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & 0o777 & ~umask)


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as an input file (a playbook, an inventory, a vars file), or
    None when it is a regular file, a folder, or not there (the caller says "not found").

    A FIFO (named pipe) blocks ``open(2)`` until some process opens it for writing (fifo(7)),
    so reading one that nobody writes hangs forever; a socket or a device is no file of text
    either. They are refused, naming what they are (``stat(2)``'s file type; symlinks followed).
    An anonymous pipe reached through ``/dev/fd/N`` is read: that is ``-i <(command)`` (bash
    process substitution), whose writer is the command, so the read ends when it does.
    """
    import stat as st

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if st.S_ISREG(mode) or st.S_ISDIR(mode):
        return None
    if st.S_ISFIFO(mode) and os.path.basename(os.path.realpath(path)).startswith("pipe:["):
        return None  # /dev/fd/N -> /proc/self/fd/N -> 'pipe:[inode]': process substitution
    kind = ("a FIFO (named pipe)" if st.S_ISFIFO(mode) else "a socket" if st.S_ISSOCK(mode)
            else "a character device" if st.S_ISCHR(mode) else "a block device" if st.S_ISBLK(mode)
            else "not a regular file")
    return f"is {kind}, not a regular file: reading it could block forever; give a file"


def unreadable_file(path: str | os.PathLike[str], what: str) -> str | None:
    """Why this controller's user cannot read ``path`` as ``what`` (``"a key file"``...), as the end
    of a sentence naming it, or None when it can: ``does not exist on this controller``, ``is a
    folder, not WHAT``, :func:`not_regular`'s reason for a FIFO/socket/device, or ``cannot be read:
    STRERROR`` (``open(2)``'s error: a mode the user has no read permission for, a parent folder it
    cannot enter, a symlink loop). The file is opened, not judged by its mode bits: root reads a
    mode-000 file, another user does not (``os.access`` would answer for the real, not the
    effective, user)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "does not exist on this controller"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    import stat as st

    if st.S_ISDIR(mode):
        return f"is a folder, not {what}"
    special = not_regular(path)
    if special:
        return special
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    os.close(fd)
    return None


def want_path(name: str, value: object, where: str = "here") -> str:
    """``value`` as a path string: the one check of every public function that takes a path
    (the API's inventory sources, playbook, ``copy``/``fetch`` src and dest, and
    :func:`fleetctl.playbook.load_playbook`), so that ``load_playbook(5)`` is one line, not
    pathlib's ``TypeError``.

    Args:
        name: the argument, as the message names it (``"path"``, ``"src"``...).
        value: what the caller passed: a ``str`` or an ``os.PathLike`` whose ``__fspath__`` gives
            a ``str`` (os.fspath; bytes paths are not taken: every message and record is text).
        where: ``"here"`` (this controller) or ``"on the hosts"``, for the message.

    Raises:
        InputError: not such a path, empty, or holding a NUL byte (no file name can:
            path_resolution(7)).
    """
    from ..errors import InputError

    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text or "\x00" in text:
        raise InputError(f"{name}: want a path {where} (a non-empty string without NUL bytes), got {value!r}")
    return text


def tidy_path(path: str) -> str:
    """``path`` with its spelling normalized and nothing resolved: repeated slashes, ``.``
    components and a trailing slash dropped (``/a//b/./c/`` -> ``/a/b/c``; ``/`` stays ``/``,
    ``~/x/`` becomes ``~/x``). ``..`` is kept and no symlink is followed, as the text is not the
    file: ``serve/`` resolves through a symlink ``serve`` while ``serve`` is the link itself, and
    ``a/link/..`` is not ``a`` (POSIX.1-2017 4.13 "Pathname Resolution"; ``posixpath.normpath``
    folds ``..`` and keeps a leading ``//``)."""
    if not path:
        return path
    lead = "/" if path.startswith("/") else ""
    return lead + "/".join(p for p in path.split("/") if p not in ("", ".")) or lead or "."
