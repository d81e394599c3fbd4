"""Device models: storage and computational-storage devices that hosts talk to over real protocols.

``nvme`` is an NVMe 1.4 controller (PCIe-style register model and NVMe/TCP target) with a file-backed
namespace; later devices (the Alkali accelerator) plug vendor commands into its handler registry.
"""
