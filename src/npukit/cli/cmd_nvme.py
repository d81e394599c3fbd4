"""``npukit nvme``: serve an NVMe/TCP storage device, and talk to one like nvme-cli does.

Verbs and flags follow nvme-cli where they fit; the connection is given with ``--connect
tcp://HOST:PORT`` (the form every NVMe/Alkali command takes) or nvme-cli's ``--traddr`` /
``--trsvcid``, and ``--nqn`` (long options only, so nvme-cli's short verb flags stay free).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from npukit.cli import ui
from npukit.errors import ConfigError

DEFAULT_NQN = "nqn.2026-11.io.npukit:nvme0"


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _connection(p: argparse.ArgumentParser, port: int = 4420, short: bool = False) -> None:
    a = ("-a", "--traddr") if short else ("--traddr",)
    s = ("-s", "--trsvcid") if short else ("--trsvcid",)
    p.add_argument(*a, default="127.0.0.1", help="target address (default 127.0.0.1)")
    p.add_argument(*s, type=int, default=port, help=f"target port (default {port})")
    p.add_argument("--connect", metavar="tcp://HOST:PORT", default=None,
                   help="target address and port in one (instead of --traddr/--trsvcid)")
    p.add_argument("--nqn", default=DEFAULT_NQN, help=f"subsystem NQN (default {DEFAULT_NQN})")
    p.add_argument("-q", "--hostnqn", help="host NQN (default derived from the host name)")
    p.add_argument("-g", "--hdr-digest", action="store_true", help="header digests (CRC32C)")
    p.add_argument("-G", "--data-digest", action="store_true", help="data digests (CRC32C)")
    p.add_argument("--json", action="store_true", help="print JSON")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nvme", help="NVMe/TCP storage device: serve it, or query one like nvme-cli")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", title="verbs")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    _register_serve(verbs)
    _register_queries(verbs)
    _register_data(verbs)
    _register_passthru_and_firmware(verbs)


def _register_serve(verbs: argparse._SubParsersAction) -> None:
    s = verbs.add_parser("serve", help="serve a file-backed namespace over NVMe/TCP (+ discovery)")
    s.add_argument("--listen", default="127.0.0.1:4420", metavar="tcp://HOST:PORT",
                   help="address to serve on, tcp://HOST:PORT or HOST:PORT (default 127.0.0.1:4420; "
                   "port 0 = any)")
    s.add_argument("--nqn", default=DEFAULT_NQN, help=f"subsystem NQN (default {DEFAULT_NQN})")
    s.add_argument("--namespace", required=True, metavar="FILE", help="namespace backing file")
    s.add_argument("--size", help="namespace size when creating FILE, e.g. 1G (fixed afterwards)")
    s.add_argument("--state-dir", help="firmware slots, SMART counters and log (default FILE.state)")
    s.add_argument("--discovery-port", type=int, default=8009,
                   help="discovery controller port (default 8009)")
    s.add_argument("--no-discovery", action="store_true", help="do not serve the discovery controller")
    s.add_argument("--advertise-addr", help="address put in discovery log entries (default: listen host)")
    s.add_argument("--allow-host", action="append", default=[], metavar="HOSTNQN",
                   help="only these host NQNs may connect (repeatable; default: any host)")
    s.add_argument("--io-queues", type=int, default=64, help="I/O queues granted per controller (default 64)")
    s.add_argument("--workers", type=int, default=None,
                   help="worker processes serving the I/O queues (default one per CPU on Linux; "
                   "0 serves every queue in the main process)")
    s.add_argument("--receive", choices=("buffers", "stream"), default=None,
                   help="how connections receive: into a preallocated buffer per connection (buffers) or "
                   "through asyncio's StreamReader (stream); default buffers")
    _alkali_hook("add_serve_arguments", s)  # --accelerators, --delegate, --compat
    s.set_defaults(func=run_serve)


def _alkali_hook(name: str, *args):
    """The Alkali accelerator device plugs into ``serve`` here (npukit.devices.alkali.serve)."""
    from npukit.devices.alkali import serve as alkali_serve

    return getattr(alkali_serve, name)(*args)


def _register_queries(verbs: argparse._SubParsersAction) -> None:
    d = verbs.add_parser("discover", help="read the discovery log page")
    _connection(d, 8009, short=True)
    d.set_defaults(func=run_discover, nqn_is_discovery=True)

    for name, helptext, func in (("id-ctrl", "Identify Controller", run_id_ctrl),
                                 ("list-ns", "active namespace IDs", run_list_ns),
                                 ("smart-log", "SMART / health log", run_smart_log)):
        v = verbs.add_parser(name, help=helptext)
        _connection(v)
        v.set_defaults(func=func)

    v = verbs.add_parser("id-ns", help="Identify Namespace")
    _connection(v)
    v.add_argument("-n", "--namespace-id", type=_int, default=1)
    v.set_defaults(func=run_id_ns)

    v = verbs.add_parser("get-log", help="any log page")
    _connection(v)
    v.add_argument("-i", "--log-id", type=_int, required=True)
    v.add_argument("-l", "--log-len", type=_int, required=True, help="bytes (a multiple of 4)")
    v.add_argument("-n", "--namespace-id", type=_int, default=0xFFFFFFFF)
    v.add_argument("--lpo", type=_int, default=0, help="log page offset in bytes")
    v.add_argument("--lsp", type=_int, default=0)
    v.add_argument("--lsi", type=_int, default=0)
    v.add_argument("--rae", action="store_true", help="retain asynchronous event")
    v.add_argument("-b", "--raw-binary", action="store_true", help="write the raw log to stdout")
    v.set_defaults(func=run_get_log)


def _register_data(verbs: argparse._SubParsersAction) -> None:
    for name, func in (("read", run_read), ("write", run_write)):
        v = verbs.add_parser(name, help=f"{name} logical blocks")
        _connection(v)
        v.add_argument("-n", "--namespace-id", type=_int, default=1)
        v.add_argument("-s", "--start-block", type=_int, default=0)
        v.add_argument("-c", "--block-count", type=_int, default=0, help="0-based, as nvme-cli")
        v.add_argument("-z", "--data-size", type=_int, help="bytes (default from --block-count)")
        v.add_argument("-d", "--data", help="file to write from / read into (default stdin / stdout)")
        if name == "write":
            v.add_argument("--force-unit-access", "-f", action="store_true")
        v.set_defaults(func=func)

    v = verbs.add_parser("flush", help="flush the volatile write cache")
    _connection(v)
    v.add_argument("-n", "--namespace-id", type=_int, default=1)
    v.set_defaults(func=run_flush)


def _register_passthru_and_firmware(verbs: argparse._SubParsersAction) -> None:
    for name in ("admin-passthru", "io-passthru"):
        v = verbs.add_parser(name, help=f"send any {name.split('-')[0]} command")
        _connection(v)
        v.add_argument("-o", "--opcode", type=_int, required=True)
        v.add_argument("-f", "--flags", type=_int, default=0)
        v.add_argument("-n", "--namespace-id", type=_int, default=0)
        v.add_argument("-2", "--cdw2", type=_int, default=0)
        v.add_argument("-3", "--cdw3", type=_int, default=0)
        for i, n in enumerate(range(10, 16)):
            v.add_argument(f"-{4 + i}", f"--cdw{n}", type=_int, default=0)
        v.add_argument("-l", "--data-len", type=_int, default=0)
        v.add_argument("-r", "--read", action="store_true", help="controller-to-host data")
        v.add_argument("-w", "--write", action="store_true", help="host-to-controller data")
        v.add_argument("-i", "--input-file", help="data to send with --write (default stdin)")
        v.add_argument("-b", "--raw-binary", action="store_true", help="write returned data to stdout raw")
        v.set_defaults(func=run_passthru, queue=name.split("-")[0])

    v = verbs.add_parser("fw-download", help="download a firmware image")
    _connection(v)
    v.add_argument("-f", "--fw", required=True, help="image file")
    v.add_argument("-x", "--xfer", type=_int, default=4096, help="bytes per command (default 4096)")
    v.add_argument("-o", "--offset", type=_int, default=0, help="starting byte offset (default 0)")
    v.set_defaults(func=run_fw_download)

    v = verbs.add_parser("fw-commit", help="commit a downloaded image to a slot / activate a slot")
    _connection(v)
    v.add_argument("-s", "--slot", type=_int, default=0)
    v.add_argument("-a", "--action", type=_int, required=True, help="commit action 0..3")
    v.set_defaults(func=run_fw_commit)


# ---- serve -----------------------------------------------------------------------------------------
def run_serve(args: argparse.Namespace) -> int:
    from npukit.devices.nvme.namespace import parse_size
    from npukit.devices.nvme.server import ServeConfig

    host, port = ui.tcp_address(args.listen, "--listen", 4420)
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    cfg = ServeConfig(listen=listen, nqn=args.nqn, namespace=args.namespace,
                      size=parse_size(args.size) if args.size else None, state_dir=args.state_dir,
                      discovery_port=None if args.no_discovery else args.discovery_port,
                      advertise=args.advertise_addr, allow_hosts=tuple(args.allow_host),
                      io_queues=args.io_queues, workers=args.workers,
                      receive=args.receive or "buffers")
    from npukit.devices.alkali.serve import AlkaliOptions

    options = AlkaliOptions(args.accelerators, args.delegate, args.compat, args.verify)
    return _alkali_hook("serve", cfg, options)


# ---- client verbs ----------------------------------------------------------------------------------
def _host(args: argparse.Namespace, io_queues: int = 0):
    from npukit.devices.nvme.client import NvmeTcpHost
    from npukit.devices.nvme.spec import DISCOVERY_NQN

    nqn = DISCOVERY_NQN if getattr(args, "nqn_is_discovery", False) else args.nqn
    host, port = args.traddr, args.trsvcid
    if args.connect:
        host, port = ui.tcp_address(args.connect, "--connect", args.trsvcid)
    return NvmeTcpHost(host, port, nqn, hostnqn=args.hostnqn, hdgst=args.hdr_digest,
                       ddgst=args.data_digest, io_queues=io_queues)


def _emit(args: argparse.Namespace, obj: dict, title: str = "") -> None:
    if args.json:
        ui.emit_json(obj)
        return
    rows = [[k, f"{v:#x}" if isinstance(v, int) and k not in _DECIMAL else v] for k, v in obj.items()]
    ui.table(rows, ["field", title or "value"])


_DECIMAL = {"nsze", "ncap", "nuse", "cntlid", "temperature", "data_units_read", "data_units_written",
            "host_read_commands", "host_write_commands", "power_cycles", "power_on_hours", "unsafe_shutdowns",
            "media_errors", "num_err_log_entries", "controller_busy_time", "avail_spare", "spare_thresh",
            "percent_used", "maxcmd", "nn", "numrec", "genctr"}


def run_discover(args: argparse.Namespace) -> int:
    with _host(args) as h:
        log = h.discovery_log()
    if args.json:
        ui.emit_json(log)
        return 0
    rows = [[i, r["subnqn"], r["traddr"], r["trsvcid"], r["subtype"]] for i, r in enumerate(log["records"])]
    ui.table(rows, ["entry", "subnqn", "traddr", "trsvcid", "subtype"])
    return 0


def run_id_ctrl(args: argparse.Namespace) -> int:
    with _host(args) as h:
        _emit(args, dict(h.identify))
    return 0


def run_id_ns(args: argparse.Namespace) -> int:
    with _host(args) as h:
        _emit(args, h.identify_namespace(args.namespace_id))
    return 0


def run_list_ns(args: argparse.Namespace) -> int:
    with _host(args) as h:
        ids = h.list_namespaces()
    if args.json:
        ui.emit_json({"nsid_list": ids})
    else:
        ui.table([[f"[{i}]", f"{n:#x}"] for i, n in enumerate(ids)], ["index", "nsid"])
    return 0


def run_smart_log(args: argparse.Namespace) -> int:
    with _host(args) as h:
        _emit(args, h.smart_log())
    return 0


def run_get_log(args: argparse.Namespace) -> int:
    if args.log_len <= 0 or args.log_len % 4:
        raise ConfigError("--log-len must be a positive multiple of 4")
    with _host(args) as h:
        data = h.get_log(args.log_id, args.log_len, nsid=args.namespace_id, offset=args.lpo, lsp=args.lsp,
                         rae=args.rae, lsi=args.lsi)
    return _emit_data(args, data, {"log_id": args.log_id})


def _emit_data(args: argparse.Namespace, data: bytes, meta: dict) -> int:
    if getattr(args, "raw_binary", False):
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    elif args.json:
        ui.emit_json(meta | {"data": data.hex()})
    else:
        for off in range(0, len(data), 16):
            print(f"{off:04x}: {data[off:off + 16].hex(' ')}")
    return 0


def _lengths(args: argparse.Namespace) -> tuple[int, int]:
    from npukit.devices.nvme.spec import LBA_SIZE

    nlb = args.block_count + 1
    size = args.data_size if args.data_size is not None else nlb * LBA_SIZE
    if size != nlb * LBA_SIZE:
        raise ConfigError(f"--data-size {size} does not match --block-count {args.block_count} "
                          f"({nlb} blocks of {LBA_SIZE} bytes)")
    return nlb, size


def run_read(args: argparse.Namespace) -> int:
    _nlb, _size = _lengths(args)
    with _host(args, io_queues=1) as h:
        data = h.read(args.start_block, _nlb, nsid=args.namespace_id)
    if args.data:
        _write_file(args.data, data)
    elif args.json:
        ui.emit_json({"start_block": args.start_block, "blocks": _nlb, "data": data.hex()})
    else:
        sys.stdout.buffer.write(data)
    return 0


def _write_file(path: str, data: bytes) -> None:
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None


def _read_input(path: str | None, size: int) -> bytes:
    try:
        data = Path(path).read_bytes() if path else sys.stdin.buffer.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) < size:
        raise ConfigError(f"input holds {len(data)} bytes, {size} needed")
    return data[:size]


def run_write(args: argparse.Namespace) -> int:
    nlb, size = _lengths(args)
    data = _read_input(args.data, size)
    with _host(args, io_queues=1) as h:
        h.write(args.start_block, data, nsid=args.namespace_id, fua=args.force_unit_access)
    if args.json:
        ui.emit_json({"start_block": args.start_block, "blocks": nlb, "status": "success"})
    else:
        print("write: Success")
    return 0


def run_flush(args: argparse.Namespace) -> int:
    with _host(args, io_queues=1) as h:
        h.flush(nsid=args.namespace_id)
    if args.json:
        ui.emit_json({"status": "success"})
    else:
        print(f"NVMe Flush: success (nsid {args.namespace_id})")
    return 0


def run_passthru(args: argparse.Namespace) -> int:
    from npukit.devices.nvme.client import NvmeStatusError
    from npukit.devices.nvme.command import Command

    if args.read and args.write:
        raise ConfigError("--read and --write together (bidirectional) are not possible over NVMe/TCP")
    data = _read_input(args.input_file, args.data_len) if args.write and args.data_len else b""
    cdws = {n: getattr(args, f"cdw{n}") for n in range(10, 16)}
    cmd = Command.build(args.opcode, nsid=args.namespace_id, flags=args.flags, cdw2=args.cdw2, cdw3=args.cdw3,
                        cdws=cdws)
    read_len = args.data_len if args.read else 0
    with _host(args, io_queues=1 if args.queue == "io" else 0) as h:
        submit = h.admin if args.queue == "admin" else h.io
        try:
            reply = submit(cmd, data, read_len)
        except NvmeStatusError as exc:
            if args.json:
                ui.emit_json({"opcode": args.opcode, "status": exc.cqe.status, "sct": exc.cqe.sct,
                              "sc": exc.cqe.sc, "dnr": exc.cqe.dnr, "result": exc.cqe.dw0})
                return 1
            raise
    if read_len:
        return _emit_data(args, reply.data, {"opcode": args.opcode, "status": 0, "result": reply.cqe.dw0})
    if args.json:
        ui.emit_json({"opcode": args.opcode, "status": 0, "result": reply.cqe.dw0})
    else:
        print(f"NVMe command result:{reply.cqe.dw0:08x}")
    return 0


def run_fw_download(args: argparse.Namespace) -> int:
    try:
        image = Path(args.fw).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {args.fw}: {exc.strerror}") from None
    if args.xfer <= 0 or args.xfer % 4:
        raise ConfigError("--xfer must be a positive multiple of 4")
    with _host(args) as h:
        h.fw_download(image, xfer=args.xfer, offset=args.offset)
    if args.json:
        ui.emit_json({"bytes": len(image), "status": "success"})
    else:
        print("Firmware download success")
    return 0


def run_fw_commit(args: argparse.Namespace) -> int:
    with _host(args) as h:
        h.fw_commit(args.slot, args.action)
        slots = h.firmware_log()
    if args.json:
        ui.emit_json({"slot": args.slot, "action": args.action, "status": "success", "firmware_log": slots})
    else:
        print(f"Success committing firmware action:{args.action} slot:{args.slot}")
    return 0
