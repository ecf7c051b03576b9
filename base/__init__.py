"""Small pieces that more than one of data/, evaluation/ and vmoe/ need, and the test suite's
helpers (*_testutil.py); imports nothing of ours outside base/."""
