"""npukit.perf"""
