"""``gameday.logs.writes_info``: whether a structlog logger would write an INFO event,
so that events per item of a batch are not put together for nothing. Real: structlog's
own loggers, filtering and over the standard library's logging."""

import logging

import structlog

from gameday.logs import writes_info


def test_a_filtering_logger_says_whether_it_writes_info() -> None:
    for level, writes in ((logging.WARNING, False), (logging.INFO, True),
                          (logging.DEBUG, True)):
        logger = structlog.wrap_logger(structlog.PrintLogger(), processors=[],
                                       wrapper_class=structlog.make_filtering_bound_logger(level))
        assert writes_info(logger.bind()) is writes


def test_a_logger_over_the_standard_library_follows_its_level() -> None:
    stdlib = logging.getLogger("gameday.test.writes_info")
    logger = structlog.stdlib.BoundLogger(stdlib, processors=[], context={})
    stdlib.setLevel(logging.WARNING)
    assert not writes_info(logger)
    stdlib.setLevel(logging.INFO)
    assert writes_info(logger)


def test_a_logger_that_cannot_tell_is_taken_to_write() -> None:
    assert writes_info(structlog.PrintLogger())
