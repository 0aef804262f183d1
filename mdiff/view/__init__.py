"""`mdiff view`: a local, read-only web server for the page that shows commits and histories (the page
itself is mdiff-js's, in ``tools/mdiff-js/view/``; it reads the commit files in the browser).

``server.py`` serves an allow-list of files and nothing else (the standard library only); ``site.py``
decides what that list holds: the page's static files and the bytes of the file or repository shown.
"""
