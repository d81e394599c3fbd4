"""The Alkali computational-storage accelerator: vendor NVMe commands on npukit's NVMe controller,
accelerators that run eBPF firmware (``npukit.targets.ebpf``) calling TFLite on the host CPU model or
on the VTA delegate, and a host-side Python API over the NVMe/TCP client. See docs/devices/alkali.md."""
