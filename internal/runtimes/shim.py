"""Entry point of the Python shim: python3 -s -B shim.py <script> <io-dir> [mode].

The shim itself is _agenthost_shim.py, imported here rather than run: a script run as
__main__ is compiled on every start (_agenthost_shim.py: about 2.4 ms of CPU, paid by
every cold start and every warm jail), while an imported module's bytecode is
read from __pycache__, which the host fills when it writes the shims
(runtimes.CompileShims; -B only stops writes). Without it, Python compiles
_agenthost_shim.py as before.
"""

import sys

import _agenthost_shim

sys.exit(_agenthost_shim.main())
