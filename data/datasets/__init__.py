"""Where examples come from: the sources by name (sources.py), the TFDS builders of ImageNet-21k
(imagenet21k.py, with stand-in archives and photographs for tools and tests) and of the embedded
sets (embedded.py, with the builders' common base), the multi-label record files (records.py) and
the build-time image checks (image_check.py).

May import base/, data/pp/ and data/config.py (ImageNet-21k's split aliases); not data/stream/
nor data/prepare.py, which read through it.
"""
