"""npukit.targets.pccx.compile"""
