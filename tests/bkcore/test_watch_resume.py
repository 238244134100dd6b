"""WatchResume: a watch broken in the middle of a revision resumes from that revision and
delivers each change once, in order."""

from bkcore.table.watch_resume import WatchResume


def deliver(resume: WatchResume, revisions: list[int]) -> list[int]:
    return [r for r in revisions if resume.is_new(r)]


def test_a_stream_broken_inside_a_revision_resumes_there_and_skips_what_came():
    resume = WatchResume()
    assert resume.new_stream() == 0
    resume.started(4)                                 # the server: every change above 4 comes
    assert deliver(resume, [5, 6, 6]) == [5, 6, 6]
    # The stream broke after two of revision 6's three changes.
    assert resume.new_stream() == 6
    assert deliver(resume, [6, 6, 6, 7]) == [6, 7]
    assert resume.new_stream() == 7
    assert deliver(resume, [7, 8]) == [8]


def test_an_explicit_start_is_kept_and_older_changes_are_dropped():
    resume = WatchResume(10)
    assert resume.new_stream() == 10
    resume.started(9)
    assert deliver(resume, [9, 10, 11]) == [10, 11]
