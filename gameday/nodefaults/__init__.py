"""Node-side fault mechanisms shared by the lab's node backend and the real host backend
(``faults.backends``): signals to processes (:mod:`.processes`), cgroups v1/v2
(:mod:`.cgroups`) and bounded resource hogs (:mod:`.hogs`). They import neither."""
