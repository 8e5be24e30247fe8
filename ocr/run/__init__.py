"""The run shell every runner uses: the entry decorator, the run folder, faults and the guard callback."""
