"""npukit.compiler"""
