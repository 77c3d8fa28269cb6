"""The report page, ``report.html`` (:mod:`.report_page`), and its Jinja2 template (``templates/``)."""
