"""What is inside each program, at a glance: typed figures, budgets and the build's timeline.

Typed values and pure functions over them: nothing here reads a file or imports torch,
executorch or pydantic. A ``.pte``'s figures are read by :mod:`ptebuild.runtime.pte_insight`;
a lowered graph's nodes are counted by :mod:`ptebuild.lowering.delegation` and
:mod:`ptebuild.lowering.memory` (in the worker). The modules:

- :mod:`.delegation`: per method, the operator nodes each delegate took and those left to
  kernels, counted as ExecuTorch's ``get_delegation_info`` counts them;
- :mod:`.sizes`: a ``.pte`` split into plan, constants, named data, each delegate's payload,
  and the ``.ptd`` files beside it;
- :mod:`.memory`: each method's planned memory, mutable buffers, and its inputs' and outputs'
  bytes at the example size and at each dynamic dim's max;
- :mod:`.calls`: what a ``.pte`` alone shows of its delegation (delegate and operator calls);
- :mod:`.program`: the three together for one program, as the report, the build record and
  ``inspect`` show them; :mod:`.file_insight`: what ``inspect`` shows of a ``.pte``;
- :mod:`.budget`: the manifest's budgets and the verdict on a program's figures;
- :mod:`.stages`: the stages of a program's build, timed where they run;
- :mod:`.timeline`, :mod:`.timeline_html`: a build's timeline as a Chrome trace and as one
  self-contained HTML page (``ptebuild build --timings``);
- :mod:`.compare`: the change of a program's figures between two releases.
"""
