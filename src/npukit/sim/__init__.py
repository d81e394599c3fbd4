"""npukit.sim"""
