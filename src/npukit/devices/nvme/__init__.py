"""NVMe storage device: NVMe 1.4 controller, file-backed namespace, NVMe/TCP target and initiator.

Layers (each imports only those before it):
``spec`` (status codes, opcodes) → ``command`` (SQE/CQE views) → ``registry`` (handlers keyed by
queue kind and opcode) → ``namespace`` / ``state`` (persistence) → ``identify`` / ``logs`` (data
structures) → ``admin`` / ``nvm`` (standard handlers) → ``controller`` / ``regs`` → ``subsystem``
(fabrics Connect, properties) → ``pcie`` (in-process host model) and ``pdu`` → ``tcp`` (asyncio
target, discovery) → ``client`` (NVMe/TCP initiator).
"""
