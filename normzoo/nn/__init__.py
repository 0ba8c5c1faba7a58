"""Building blocks with no knowledge of Lightning: norms, attention, feed-forward, embeddings."""
