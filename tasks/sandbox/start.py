"""The sandbox's command line (`layout.main`): this folder becomes a package of its own,
`rlvr_sandbox`, found through the package's path and never through sys.path, so that the tests'
`import math` or `import code` find the standard library's and not a module of the project
(tasks/math.py, tasks/code.py); and the layout, imported rather than run as a script, is read from
its compiled form."""

import os
import sys
import types

package = types.ModuleType("rlvr_sandbox")
package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
sys.modules["rlvr_sandbox"] = package

from rlvr_sandbox.layout import main  # noqa: E402

main(sys.argv[1:])
