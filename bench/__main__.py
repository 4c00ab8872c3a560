"""`make bench`: every benchmark, each printed as a ratio against a baseline of the same run."""

from bench import pool_scale

if __name__ == "__main__":
    pool_scale.main()
