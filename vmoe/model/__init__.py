"""The model: the ViT (vit.py), its MoE layer (moe.py), and the sharding of arrays over a device
mesh (sharding.py). May import base/, vmoe/routing/ and itself.
"""
