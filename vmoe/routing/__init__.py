"""The routers (paper Sec. 2-3 and the routers published after it). Each router is a JAX-free
declaration (declarations.py: name, title, allocation kind, presets, options; with
router_config.py, capacity.py and user_module.py, what the configs and reporting read without
JAX) and an implementation (router_spec.RouterSpec: the paper's in paper_routers.py, the others in
lab_routers.py) that registry.py maps names to; router.py's Flax module runs them. May import
base/ and itself; nothing else of vmoe/.
"""
