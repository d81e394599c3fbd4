"""npukit.targets"""
