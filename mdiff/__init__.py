"""mdiff: incremental changes to model parameters, one HDF5 file per commit."""

__version__ = "0.1.0"
