"""Small pieces that more than one of data/, evaluation/ and vmoe/ need; imports nothing of ours
outside base/."""
