"""An aarch64 Python for npukit under user-mode QEMU, built from registry packages and cached.

The recipe, each step skipped when its cached result matches its inputs:

1. ``qemu``: Debian's ``qemu-aarch64-static`` (package ``qemu-user-static``), called explicitly with
   ``-L <root>``, so no binfmt_misc registration is needed (containers usually have none).
2. ``debian-arm64``: ``apt-get`` with private state and cache folders and ``APT::Architecture=arm64``
   downloads the dependency closure of ``python3.11`` (+ ``libstdc++6`` for the numpy/tokenizers
   wheels, ``libgomp1`` for numba's OpenMP layer) from the host's own Debian sources; the host's
   dpkg database and lists are never touched.
3. ``root``: ``dpkg-deb -x`` of every package of that closure into ``<cache>/root``: no maintainer
   scripts run, no chroot, no binfmt; the arm64 loader finds its libraries through ``-L``.
4. ``wheels``: the manylinux aarch64 wheels of npukit's runtime dependencies at the versions pinned
   in constraints.txt (``pip download --platform ... --only-binary=:all:``).
5. ``site``: ``pip install --target <cache>/site --no-deps`` of those wheels (npukit itself runs
   from the source tree through PYTHONPATH).
6. ``probe``: the arm64 interpreter imports them and reports what LLVM sees as its CPU.

Everything lives in ``$NPUKIT_AARCH64_CACHE`` (default ``~/.cache/npukit/aarch64``); a second run
only checks stamps. A failing step raises :class:`RecipeError` naming the step and the reason.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DEBIAN_PACKAGES = ("python3.11", "libstdc++6", "libgomp1")
# npukit's runtime dependencies (pyproject [project].dependencies) plus their own runtime needs
# (llvmlite for numba, flatbuffers for tflite); tests check that this covers pyproject
WHEELS = ("numpy", "numba", "llvmlite", "tokenizers", "orjson", "crc32c", "pyelftools", "tflite",
          "flatbuffers", "threadpoolctl", "rich", "markdown-it-py", "mdurl", "pygments")
# manylinux tags an arm64 Debian 12 (glibc 2.36) runs; a wheel names the oldest glibc it needs
WHEEL_PLATFORMS = ("manylinux2014_aarch64", *(f"manylinux_2_{v}_aarch64" for v in range(17, 37)), "any")
GUEST_PYTHON = "usr/bin/python3.11"
QEMU = "qemu-aarch64-static"


class RecipeError(RuntimeError):
    """A step of the aarch64 recipe failed; ``step`` names it, the message says why."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"aarch64 recipe step {step!r} failed: {reason}")
        self.step, self.reason = step, reason


def default_cache() -> Path:
    env = os.environ.get("NPUKIT_AARCH64_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "npukit" / "aarch64"


def log(msg: str) -> None:
    """Progress on stderr, one line per event, so it reads the same on a terminal, in CI and in a pipe."""
    print(f"[aarch64 {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(step: str, cmd: list[str], timeout: float, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> str:
    """Run one setup command; a non-zero exit or a time-out is a RecipeError quoting its last lines."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise RecipeError(step, f"`{' '.join(cmd[:4])} ...` timed out after {timeout:.0f} s") from e
    except FileNotFoundError as e:
        raise RecipeError(step, f"{cmd[0]} is not installed") from e
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-8:])
        raise RecipeError(step, f"`{' '.join(cmd[:6])} ...` exited {p.returncode}:\n{tail}")
    return p.stdout


def pins(constraints: Path) -> dict[str, str]:
    """name (lower case, '-' for '_') -> version, from the ``name==version`` lines of constraints.txt."""
    out = {}
    for line in constraints.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def core_dependencies(pyproject: Path) -> list[str]:
    """The names of pyproject's [project].dependencies (what npukit needs to run at all)."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [re.split(r"[=<>!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps]


@dataclass
class Root:
    """The cached aarch64 userland: where everything is, and how long each step took."""

    cache: Path
    repo: Path
    steps: list[dict[str, object]] = field(default_factory=list)
    probe: dict[str, object] = field(default_factory=dict)
    closure: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def sysroot(self) -> Path:
        return self.cache / "root"

    @property
    def site(self) -> Path:
        return self.cache / "site"

    @property
    def qemu(self) -> str:
        return shutil.which(QEMU) or QEMU

    def _apt(self, *args: str) -> list[str]:
        apt = self.cache / "apt"
        opts = {"APT::Architecture": "arm64", "APT::Architectures": "arm64",
                "Dir::State": apt / "state", "Dir::State::Lists": apt / "lists",
                "Dir::State::status": apt / "state" / "status", "Dir::Cache": apt / "cache",
                "Debug::NoLocking": "1", "APT::Sandbox::User": "root"}
        return ["apt-get", "-q", *(f"-o{k}={v}" for k, v in opts.items()), *args]

    def guest_command(self, *args: str) -> list[str]:
        """The argv that runs the arm64 Python with ``args`` under QEMU."""
        return [self.qemu, "-L", str(self.sysroot), str(self.sysroot / GUEST_PYTHON), *args]

    def guest_env(self, src: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A clean environment for the guest: none of the host's Python, loader or BLAS settings
        (OPENBLAS_CORETYPE names an x86 core, LD_LIBRARY_PATH x86 libraries)."""
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
        env.update(PYTHONPATH=f"{self.site}{os.pathsep}{src}", PYTHONNOUSERSITE="1")
        env.update(extra or {})
        return env

    def _step(self, name: str, fn: Callable[[], str]) -> None:
        t0 = time.perf_counter()
        note = fn()
        dt = time.perf_counter() - t0
        self.steps.append({"step": name, "seconds": round(dt, 2), "note": note})
        log(f"{name}: {note} ({dt:.1f} s)")

    def ensure(self) -> Root:
        """Build (or find cached) every piece; RecipeError names the step that cannot be done here."""
        self.cache.mkdir(parents=True, exist_ok=True)
        log(f"cache {self.cache} (first run: ~100 MB of downloads, then cached)")
        with (self.cache / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once (two checkouts' tests) build it once
            self._step("qemu", self._qemu)
            self._step("debian-arm64", self._debs)
            self._step("root", self._root)
            self._step("wheels", self._wheels)
            self._step("site", self._site)
        self._step("probe", self._probe)
        return self

    def _qemu(self) -> str:
        if not shutil.which(QEMU):
            raise RecipeError("qemu", f"{QEMU} not on PATH: install Debian's qemu-user-static "
                              "(scripts/ensure_debian_deps.sh does)")
        return run("qemu", [QEMU, "--version"], 30).splitlines()[0]

    def _closure(self) -> list[tuple[str, str, str]]:
        """(name, version, arch) of every package `apt-get install` would bring into an empty root,
        remembered beside the lists it was resolved from (resolving reads ~20 MB of lists)."""
        lists = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                       for p in (self.cache / "apt" / "lists").glob("*_Packages*"))
        key = json.dumps({"packages": DEBIAN_PACKAGES, "lists": lists})
        memo = self.cache / "apt" / "closure.json"
        if not self.closure and memo.is_file() and json.loads(memo.read_text()).get("key") == key:
            self.closure = [tuple(c) for c in json.loads(memo.read_text())["closure"]]
        if self.closure:
            return self.closure
        out = run("debian-arm64", self._apt("install", "-s", "--no-install-recommends",
                                            *DEBIAN_PACKAGES), 120)
        found = re.findall(r"^Inst (\S+) \((\S+) .*\[(\S+)\]\)", out, flags=re.M)
        if not found:
            raise RecipeError("debian-arm64", "apt-get resolved no arm64 packages for "
                              f"{' '.join(DEBIAN_PACKAGES)}")
        self.closure = [(n.split(":")[0], v, a) for n, v, a in found]
        memo.write_text(json.dumps({"key": key, "closure": self.closure}))
        return self.closure

    def _deb_files(self) -> list[Path]:
        archives = self.cache / "apt" / "cache" / "archives"
        return [archives / f"{n}_{v.replace(':', '%3a')}_{a}.deb" for n, v, a in self._closure()]

    def _debs(self) -> str:
        apt = self.cache / "apt"
        for d in ("state", "lists/partial", "cache/archives/partial"):
            (apt / d).mkdir(parents=True, exist_ok=True)
        (apt / "state" / "status").touch()
        if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
            raise RecipeError("debian-arm64", "needs a Debian host (apt-get and dpkg-deb)")
        if not list((apt / "lists").glob("*_Packages*")):
            log("debian-arm64: apt-get update for arm64 (private lists, ~20 MB)")
            run("debian-arm64", self._apt("update"), 600)
        missing = [f for f in self._deb_files() if not f.is_file()]
        if missing:
            log(f"debian-arm64: downloading {len(missing)} packages ({' '.join(DEBIAN_PACKAGES)} "
                "and their dependencies)")
            try:
                run("debian-arm64", self._apt("install", "--download-only", "-y",
                                              "--no-install-recommends", *DEBIAN_PACKAGES), 900)
            except RecipeError:  # lists older than the mirror (a point release replaced a file)
                log("debian-arm64: download failed; refreshing the arm64 lists once")
                run("debian-arm64", self._apt("update"), 600)
                self.closure = []  # resolved again from the new lists
                run("debian-arm64", self._apt("install", "--download-only", "-y",
                                              "--no-install-recommends", *DEBIAN_PACKAGES), 900)
        files = self._deb_files()
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise RecipeError("debian-arm64", f"apt-get left out {', '.join(absent)}")
        return f"{len(files)} packages" + (" (cached)" if not missing else " downloaded")

    def _root(self) -> str:
        files = self._deb_files()
        stamp = self.sysroot / ".npukit-debs"
        want = "\n".join(sorted(f.name for f in files))
        if stamp.is_file() and stamp.read_text() == want:
            return f"{self.sysroot} (cached)"
        tmp = self.cache / "root.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        log(f"root: unpacking {len(files)} packages into {self.sysroot}")
        for f in files:
            run("root", ["dpkg-deb", "-x", str(f), str(tmp)], 300)
        if not (tmp / GUEST_PYTHON).is_file():
            raise RecipeError("root", f"no {GUEST_PYTHON} after unpacking {len(files)} packages")
        (tmp / ".npukit-debs").write_text(want)
        shutil.rmtree(self.sysroot, ignore_errors=True)
        tmp.rename(self.sysroot)
        return f"{self.sysroot} unpacked"

    def requirements(self) -> list[str]:
        pinned = pins(self.repo / "constraints.txt")
        absent = [w for w in WHEELS if w not in pinned]
        if absent:
            raise RecipeError("wheels", f"constraints.txt pins no version of {', '.join(absent)}")
        return [f"{w}=={pinned[w]}" for w in WHEELS]

    def _pip_platform_args(self) -> list[str]:
        args = ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                "--abi", "cp311", "--abi", "abi3", "--abi", "none"]
        for tag in WHEEL_PLATFORMS:
            args += ["--platform", tag]
        return args

    def _wheels(self) -> str:
        reqs = self.requirements()
        wheels = self.cache / "wheels"
        stamp = wheels / ".npukit-requirements"
        if stamp.is_file() and stamp.read_text() == "\n".join(reqs):
            return f"{len(reqs)} wheels (cached)"
        wheels.mkdir(parents=True, exist_ok=True)
        log(f"wheels: pip download of {len(reqs)} manylinux aarch64 wheels (~80 MB)")
        run("wheels", [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                       *self._pip_platform_args(), *reqs], 900)
        stamp.write_text("\n".join(reqs))
        return f"{len(reqs)} wheels downloaded"

    def _wheel_files(self, reqs: list[str]) -> list[str]:
        files = []
        for req in reqs:
            name, version = req.split("==")
            stem = f"{name.replace('-', '_')}-{version}-"
            hits = sorted(p for p in (self.cache / "wheels").glob("*.whl") if p.name.lower().startswith(stem))
            if not hits:
                raise RecipeError("site", f"no downloaded wheel for {req}")
            files.append(str(hits[-1]))
        return files

    def _site(self) -> str:
        reqs = self.requirements()
        stamp = self.site / ".npukit-requirements"
        if stamp.is_file() and stamp.read_text() == "\n".join(reqs):
            return f"{self.site} (cached)"
        tmp = self.cache / "site.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        run("site", [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                     "--no-compile", "--target", str(tmp), *self._pip_platform_args(),
                     *self._wheel_files(reqs)], 900)
        (tmp / ".npukit-requirements").write_text("\n".join(reqs))
        shutil.rmtree(self.site, ignore_errors=True)
        tmp.rename(self.site)
        return f"{self.site} installed"

    def _probe(self) -> str:
        code = ("import json, platform, sys, numpy, numba, llvmlite.binding as ll, tokenizers, orjson, "
                "crc32c, elftools, tflite, threadpoolctl; print(json.dumps({'machine': platform.machine(), "
                "'python': platform.python_version(), 'numpy': numpy.__version__, "
                "'numba': numba.__version__, 'llvm_cpu': ll.get_host_cpu_name(), "
                "'llvm_features': ll.get_host_cpu_features().flatten()}))")
        out = run("probe", self.guest_command("-c", code), 300, env=self.guest_env(self.repo / "src"))
        self.probe = json.loads(out.strip().splitlines()[-1])
        if self.probe.get("machine") != "aarch64":
            raise RecipeError("probe", f"the guest Python reports machine {self.probe.get('machine')!r}")
        return (f"Python {self.probe['python']} on {self.probe['machine']}, numpy {self.probe['numpy']}, "
                f"numba {self.probe['numba']}, LLVM CPU {self.probe['llvm_cpu']!r}")
