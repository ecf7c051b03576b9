"""Where examples come from: the sources by name (sources.py), the TFDS builders of ImageNet-21k
(imagenet21k.py) and of the embedded sets (embedded.py), the multi-label record files
(records.py) and the build-time image checks (image_check.py).

May import base/, data/pp/ and data/config.py; not data/stream/ nor data/prepare.py, which read
through it. This file imports nothing, so a plain module of it loads no framework.
"""
