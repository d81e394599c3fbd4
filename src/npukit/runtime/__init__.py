"""npukit.runtime"""
