"""The routers (paper Sec. 2-3 and the routers published after it): affinities, allocations and
the registry that composes them (registry.py), the paper's routers (router.py) and the others
(lab_routers.py). May import base/ and itself; nothing else of vmoe/. names.py imports nothing,
so that reporting code (results/) can read the routers' names without JAX.
"""
