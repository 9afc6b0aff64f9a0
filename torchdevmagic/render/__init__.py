"""Records -> words: every English sentence the reports print lives here.

:mod:`.blocks` is the one intermediate (lines and tables) written as text, HTML and rich;
:mod:`.devices` lays out the ``%devices`` report, :mod:`.findings` words its findings.
Other results (EnvReport, TimingResult, Diagnosis) still render through
:mod:`torchdevmagic._display`, whose helpers stay importable from there.
"""
