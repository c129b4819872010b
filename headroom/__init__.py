"""headroom: how much faster does a real model get if someone writes a faster GPU kernel?"""

__version__ = "0.1.0"
