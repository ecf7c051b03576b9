"""A split as a stream of batches: the data orders (orders.py), the reader of records by index
(reader.py), splits cached decoded (split_cache.py), batching and per-example seeds
(batches.py), what the host ships to the accelerator (shipping.py), and the train and eval
iterators that join them (pipeline.py).

May import base/ and the rest of data/ but data/prepare.py, which uses it.
"""
