"""Compiler pieces every target may use (no target-specific code here).

* `record` — `Recorder`: an operation set that logs each call (name, argument shapes, flags), the
  starting point for lowering a reference written as "one call = one future instruction".
* `liveness` — `lifetimes` (first/last use of each buffer over a node order) and `first_fit`
  (a linear-scan, first-fit placement of those lifetimes into an address range).
* `pipeline` — `Stage` / `Pipeline`: a compiler as a list of named stages with typed results, in the
  style of ZigZag's stage lists; every stage's result and time is kept for reports.

A target's own lowering, code generation and encoding live in ``npukit/targets/<name>/compile/``.
"""
