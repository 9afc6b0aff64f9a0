"""Records -> words: every English sentence the reports print lives here.

:mod:`.blocks` is the one intermediate (lines and tables) written as text, HTML and rich;
:mod:`.devices` lays out the ``%devices`` report, :mod:`.findings` words its findings,
:mod:`.pictures` chooses its bars and :mod:`.bars` draws them (HTML and CSS only).
Other results (EnvReport, TimingResult, Diagnosis) still render through
:mod:`torchdevmagic._display`, whose helpers stay importable from there.
"""
