"""The builder: action keys, lowering in workers, checks, publishing outputs."""
