"""npukit.formats"""
