"""The trace core: load a Kineto trace, attribute, classify, account, analyse.

load -> attribute -> classify -> accounting -> analysis (-> layers)
"""
