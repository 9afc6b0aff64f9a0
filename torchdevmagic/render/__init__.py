"""Records -> words: every English sentence the reports print lives here.

:mod:`.blocks` is the one intermediate (lines and tables) written as text, HTML and rich;
:mod:`.devices` lays out the ``%devices`` report, :mod:`.findings` words its findings,
:mod:`.pictures` chooses its bars and :mod:`.bars` draws them (HTML and CSS only);
:mod:`.env` words the environment verdict, :mod:`.timing` a timed cell (with
:mod:`.samples`, the chart of its samples), :mod:`.emulation` the emulation status.
"""
