#!/usr/bin/env python3
"""Build (once, cached) a tiny Linux guest that is a real NVMe/TCP host: Debian's 6.1 kernel with its
nvme-tcp modules, static busybox and nvme-cli in an initramfs.

    python tools/qemu_guest/build_guest.py            # prints the manifest JSON (paths of kernel + initrd)

Cache: ``$NPUKIT_GUEST_CACHE`` or ``~/.cache/npukit/qemu-guest`` (outside the repository). Needs the
Debian packages from ``scripts/ensure_debian_deps.sh`` (busybox-static, nvme-cli, cpio, kmod) and
``apt-get download`` access for the kernel package. A per-run script goes into a second gzip'd cpio
archive appended to the initramfs (``script_archive``); the guest's /init runs ``/test.sh`` from it.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILDER_VERSION = 3
KERNEL_PATTERN = r"^linux-image-6\.1\.0-[0-9]+-amd64$"
TARGET_MODULES = ["nvme-tcp", "e1000"]
# soft dependencies modules.dep does not list (crypto providers the hard dependencies look up by name)
SOFT_MODULES = ["crct10dif_generic", "crc64_rocksoft_generic", "crc32c_generic"]
GUEST_TOOLS = ["/usr/sbin/nvme"]

INIT = """#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /etc/nvme /sbin /usr/bin /usr/sbin
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do
    insmod /lib/modules/$m.ko 2>/dev/null || echo "guest: insmod $m failed"
done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
if [ -x /test.sh ]; then /test.sh; else echo "guest: no /test.sh"; fi
sync
poweroff -f
"""


class GuestBuildError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("NPUKIT_GUEST_CACHE", Path.home() / ".cache" / "npukit" / "qemu-guest"))


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)
    except FileNotFoundError:
        raise GuestBuildError(f"{cmd[0]} is missing: run scripts/ensure_debian_deps.sh") from None
    except subprocess.CalledProcessError as exc:
        raise GuestBuildError(f"{' '.join(cmd)} failed: {exc.stderr.strip()[-500:]}") from None


def newest_kernel_package() -> str:
    def search() -> list[str]:
        out = run(["apt-cache", "search", "--names-only", KERNEL_PATTERN]).stdout
        return [line.split()[0] for line in out.splitlines() if line.strip()]

    names = search()
    if not names:
        run(["apt-get", "update", "-qq"])
        names = search()
    if not names:
        raise GuestBuildError("no linux-image-6.1.0-N-amd64 package is known to apt")
    return max(names, key=lambda n: int(re.search(r"6\.1\.0-(\d+)-", n).group(1)))


def fetch_kernel(cache: Path, package: str) -> tuple[Path, str]:
    """Download and unpack the kernel package; returns (unpacked root, kernel version)."""
    version = package.removeprefix("linux-image-")
    root = cache / f"kernel-{version}"
    if (root / ".complete").exists():
        return root, version
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        run(["apt-get", "download", package], cwd=debs)
        found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        raise GuestBuildError(f"apt-get download {package} produced no .deb")
    shutil.rmtree(root, ignore_errors=True)
    run(["dpkg-deb", "-x", str(found[-1]), str(root)])
    run(["depmod", "-b", str(root), version])
    (root / ".complete").write_text(version)
    return root, version


def module_order(root: Path, version: str) -> list[Path]:
    """Module files in load order: dependencies first (from depmod's modules.dep)."""
    moddir = root / "lib" / "modules" / version
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    by_name = {_modname(p): p for p in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for dep in deps.get(path, []):
            visit(dep)
        order.append(path)

    for name in SOFT_MODULES + TARGET_MODULES:
        path = by_name.get(name.replace("-", "_"))
        if path is None:
            if name in TARGET_MODULES:
                raise GuestBuildError(f"module {name} is not in {moddir}")
            continue
        visit(path)
    return [moddir / p for p in order]


def _modname(path: str) -> str:
    name = Path(path).name
    return re.sub(r"\.ko(\.(xz|zst|gz))?$", "", name).replace("-", "_")


def shared_libraries(binary: str) -> list[str]:
    proc = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
    out = proc.stdout if proc.returncode == 0 else ""  # "not a dynamic executable": exit status 1
    libs = []
    for line in out.splitlines():
        m = re.search(r"(/\S+)\s*\(0x", line)
        if m:
            libs.append(m.group(1))
    return libs


def _copy(src: str | Path, staging: Path, dest: str | None = None) -> None:
    target = staging / (dest or str(src)).lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), target)


def make_cpio(staging: Path, out: Path) -> None:
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*"))
    proc = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet", "-R", "0:0"], cwd=staging,
                          input="\n".join([".", *files]).encode(), capture_output=True, check=False)
    if proc.returncode:
        raise GuestBuildError(f"cpio failed: {proc.stderr.decode()[-300:]}")
    out.write_bytes(gzip.compress(proc.stdout, compresslevel=6))


def build(cache: Path | None = None) -> dict:
    """Build the guest once per kernel package and builder version; concurrent callers wait for the
    first one (a lock file in the cache)."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(cache)


def _build_locked(cache: Path) -> dict:
    package = newest_kernel_package()
    key = hashlib.sha256(f"{BUILDER_VERSION}{package}{INIT}".encode()).hexdigest()[:12]
    manifest_path = cache / f"guest-{key}.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if Path(manifest["kernel"]).exists() and Path(manifest["initrd"]).exists():
            return manifest
    root, version = fetch_kernel(cache, package)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        staging = Path(tmp) / "root"
        busybox = shutil.which("busybox") or "/bin/busybox"
        if not Path(busybox).exists():
            raise GuestBuildError("busybox is missing: run scripts/ensure_debian_deps.sh")
        if shared_libraries(busybox):
            raise GuestBuildError(f"{busybox} is dynamically linked: install busybox-static "
                                  "(scripts/ensure_debian_deps.sh)")
        _copy(busybox, staging, "/bin/busybox")
        for tool in GUEST_TOOLS:
            if not Path(tool).exists():
                raise GuestBuildError(f"{tool} is missing: run scripts/ensure_debian_deps.sh")
            _copy(tool, staging)
            for lib in shared_libraries(tool):
                _copy(lib, staging)
        names = []
        for mod in module_order(root, version):
            name = _modname(mod.name)
            dest = staging / "lib" / "modules" / f"{name}.ko"
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = mod.read_bytes()
            dest.write_bytes(lzma.decompress(data) if mod.name.endswith(".xz") else data)
            names.append(name)
        (staging / "modules.order").write_text("\n".join(names) + "\n")
        init = staging / "init"
        init.write_text(INIT)
        init.chmod(0o755)
        initrd = cache / f"initrd-{key}.cpio.gz"
        make_cpio(staging, initrd)
    kernel = cache / f"vmlinuz-{version}"
    shutil.copy2(root / "boot" / f"vmlinuz-{version}", kernel)
    manifest = {"kernel": str(kernel), "initrd": str(initrd), "kernel_version": version, "package": package,
                "modules": names}
    manifest_path.write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(root, ignore_errors=True)  # 400 MB unpacked; the .deb stays for a rebuild
    return manifest


def tool_archive(tools: list[str], cache: Path | None = None) -> Path:
    """A gzip'd cpio archive of extra guest binaries and every shared library they load (built once per
    set of binaries, cached): tests that need a large tool (fio loads ~80 MB of libraries) append it to
    the base initrd instead of every boot carrying it."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    missing = [tool for tool in tools if not Path(tool).exists()]
    if missing:
        raise GuestBuildError(f"{', '.join(missing)} missing: run scripts/ensure_debian_deps.sh")
    stamp = "".join(f"{t}:{Path(t).stat().st_size}:{Path(t).stat().st_mtime_ns};" for t in tools)
    out = cache / f"tools-{hashlib.sha256(stamp.encode()).hexdigest()[:12]}.cpio.gz"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            staging = Path(tmp) / "root"
            for tool in tools:
                _copy(tool, staging)
                for lib in shared_libraries(tool):
                    _copy(lib, staging)
            make_cpio(staging, Path(tmp) / "tools.cpio.gz")
            shutil.move(Path(tmp) / "tools.cpio.gz", out)
    return out


def script_archive(manifest: dict, files: dict[str, str | bytes], out: Path, extra: list[Path] = ()) -> Path:
    """The base initrd followed by a gzip'd cpio archive holding ``files`` (path → text or bytes,
    executable) and the shared reporting library ``/report.sh`` every guest script sources: the kernel
    unpacks concatenated archives in order, so these files join the base image."""
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "root"
        for name, content in {"/report.sh": (HERE / "report.sh").read_bytes(), **files}.items():
            path = staging / name.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
            path.chmod(0o755)
        archive = Path(tmp) / "extra.cpio.gz"
        make_cpio(staging, archive)
        parts = [Path(manifest["initrd"]), *extra, archive]
        out.write_bytes(b"".join(part.read_bytes() for part in parts))
    return out


def qemu_command(manifest: dict, initrd: Path, results: Path, memory_mb: int = 512) -> list[str]:
    """QEMU under TCG (KVM hangs in these sandboxes): console on stdout, results on the second serial
    port (guest /dev/ttyS1), user networking where 10.0.2.2 is the host's 127.0.0.1."""
    return ["qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-m", str(memory_mb), "-smp", "1",
            "-display", "none", "-monitor", "none", "-no-reboot",
            "-serial", "stdio", "-serial", f"file:{results}",
            "-kernel", manifest["kernel"], "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 loglevel=4",
            "-netdev", "user,id=n0", "-device", "e1000,netdev=n0"]


def main() -> int:
    try:
        manifest = build()
    except GuestBuildError as exc:
        print(f"build_guest: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
