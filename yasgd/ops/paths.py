"""Where the operator library's files are: one definition for the builder
(:mod:`yasgd.ops.build`) and the loader (:mod:`yasgd.ops.library`). A module of its own
so that importing the package never imports the builder, which ``python -m
yasgd.ops.build`` runs as a script."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
#: The compiled library, written by yasgd.ops.build, loaded by yasgd.ops.library.
LIBRARY = os.path.join(HERE, "libyasgd_ops.so")
#: Its C++ source.
SOURCE = os.path.join(HERE, "yasgd_ops.cc")
