"""The search page at `/` (issue 42), driven by a real headless browser (Debian's chromium through
chromedriver) against a real `ldr serve`: type a query and see hits with their passages and
marked terms, change the retrievers, apply a filter, see a hostile title rendered as text."""
import shutil

import pytest

import ldr

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")

CHROMIUM, DRIVER = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no headless browser: apt-get install chromium "
                                                                  "chromium-driver (.ci/run installs them)")

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
DOCS = [{"id": "bridge-1", "title": HOSTILE, "text": "The bearing plates of the bridge show section loss from "
         "corrosion; the inspector requires a weight restriction.", "team": "red"},
        {"id": "bridge-2", "title": "Second bridge", "text": "Corrosion of the bearing plates was found on the "
         "north span; repainting is planned.", "team": "blue"},
        {"id": "lamp", "title": "Lighthouse log", "text": "The keeper relit the lamp at midnight.", "team": "blue"},
        {"id": "long", "title": "Ferry ledger", "text": "Cargo manifests were copied into the ledger by hand. " * 300
         + "The harbour master signed the ferry permit at noon. " + "Cargo manifests were copied again. " * 300},
        {"id": "emoji", "title": "Harbour log", "text": "\U0001F30A\U0001F30A\U0001F6A2\u2693 the harbour gate opened "
         "at dawn.", "team": "green"}]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from test_serve import Server

    path = tmp_path_factory.mktemp("page") / "idx"
    ldr.Index.build(DOCS, path, bm25="native", dense=None, sparse=None)
    server = Server(path)
    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(a)
    from selenium.common.exceptions import WebDriverException

    try:
        driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    except WebDriverException as e:     # a browser that cannot start here (no display server needed: headless)
        server.stop()
        pytest.skip(f"chromium did not start: {str(e).splitlines()[0][:200]}")
    try:
        driver.get(server.url + "/")
        yield driver
    finally:
        driver.quit()
        server.stop()


def _search(driver, query, mode="", filters=""):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: "documents" in d.find_element(By.ID, "info").text)
    q = driver.find_element(By.ID, "q")
    q.clear()
    q.send_keys(query)
    Select(driver.find_element(By.ID, "mode")).select_by_value(mode)
    f = driver.find_element(By.ID, "filters")
    f.clear()
    f.send_keys(filters)
    driver.execute_script("document.getElementById('status').textContent = ''")
    driver.find_element(By.ID, "go").click()
    WebDriverWait(driver, 30).until(lambda d: "(generation" in d.find_element(By.ID, "status").text
                                    or d.find_element(By.ID, "error").text)
    return driver.find_elements(By.CSS_SELECTOR, ".hit")


def test_a_query_shows_hits_with_passages_and_marked_terms(page):
    from selenium.webdriver.common.by import By

    hits = _search(page, "corrosion of the bearing plates")
    assert len(hits) == 2 and {"bridge-1", "bridge-2"} == {h.find_element(By.CLASS_NAME, "id").text for h in hits}
    marks = [m.text.lower() for m in page.find_elements(By.CSS_SELECTOR, ".passage mark")]
    assert "corrosion" in marks and "bearing" in marks
    scores = hits[0].find_element(By.CLASS_NAME, "scores").get_attribute("textContent")   # folded until "more"
    assert "fused" in scores or "bm25" in scores
    assert "windows" in page.find_element(By.ID, "plan").get_attribute("textContent")
    assert "5 documents" in page.find_element(By.ID, "info").text


def test_a_hostile_title_is_text(page):
    from selenium.webdriver.common.by import By

    hits = _search(page, "bearing plates section loss")
    titles = [h.find_element(By.CLASS_NAME, "title").text for h in hits]
    assert HOSTILE in titles
    assert page.execute_script("return window.pwned") is None
    assert not page.find_elements(By.CSS_SELECTOR, ".hit img, .hit script")


def test_the_mode_and_a_filter_change_the_hits(page):
    from selenium.webdriver.common.by import By

    hits = _search(page, "corrosion bearing", mode="bm25")
    assert hits and all("fused" not in h.find_element(By.CLASS_NAME, "scores").get_attribute("textContent")
                        for h in hits)
    hits = _search(page, "corrosion bearing", filters="team=blue")
    assert [h.find_element(By.CLASS_NAME, "id").text for h in hits] == ["bridge-2"]
    _search(page, "corrosion", filters="team")
    assert "bad filter" in page.find_element(By.ID, "error").text


def test_marks_are_placed_by_code_points_after_emoji(page):
    """Issue 57 item 13: offsets are code points (Python's); a page slicing UTF-16 marked "the har"
    after four emoji. Now the mark is the word."""
    from selenium.webdriver.common.by import By

    hits = _search(page, "harbour gate", mode="bm25")
    assert hits[0].find_element(By.CLASS_NAME, "id").text == "emoji"
    marks = [m.text.lower() for m in hits[0].find_elements(By.CSS_SELECTOR, ".passage mark")]
    assert marks and set(marks) <= {"harbour", "gate"} and "harbour" in marks


def _wait(driver, cond):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, 30).until(cond)


def test_the_field_list_counts_values_and_a_click_filters(page):
    """Issue 58: the fields one can filter on, with facet counts from the index's metadata; a
    value clicked becomes a filter line and the search runs again."""
    from selenium.webdriver.common.by import By

    _search(page, "corrosion bearing")
    fields = {f.find_element(By.CLASS_NAME, "name").text: f for f in page.find_elements(By.CSS_SELECTOR, ".field")}
    assert set(fields) == {"team"} and "4 docs" in fields["team"].text
    values = {b.find_element(By.CLASS_NAME, "v").text: b.find_element(By.CLASS_NAME, "n").text
              for b in fields["team"].find_elements(By.CLASS_NAME, "value")}
    assert values == {"blue": "2", "green": "1", "red": "1"}
    page.execute_script("document.getElementById('status').textContent = ''")
    next(b for b in fields["team"].find_elements(By.CLASS_NAME, "value") if b.text.startswith("blue")).click()
    _wait(page, lambda d: "(generation" in d.find_element(By.ID, "status").text)
    assert page.find_element(By.ID, "filters").get_attribute("value") == "team=blue"
    assert [h.find_element(By.CLASS_NAME, "id").text for h in page.find_elements(By.CSS_SELECTOR, ".hit")] == ["bridge-2"]


def test_the_query_is_in_the_url_and_a_hit_opens_its_document(page, tmp_path):
    """Issue 58: the URL holds the query (a bookmark, Back), the relevance comes first, a hit is
    compact until "more", and its title opens the whole document."""
    from urllib.parse import parse_qs, urlparse

    from selenium.webdriver.common.by import By

    hits = _search(page, "keeper relit the lamp")
    assert parse_qs(urlparse(page.current_url).query)["q"] == ["keeper relit the lamp"]
    top = hits[0]
    assert top.find_element(By.CSS_SELECTOR, "div > span:first-child").text.startswith("relevance")
    assert not top.find_element(By.CLASS_NAME, "scores").is_displayed()
    top.find_element(By.CLASS_NAME, "more").click()
    assert top.find_element(By.CLASS_NAME, "scores").is_displayed()
    url = page.current_url
    top.find_element(By.CLASS_NAME, "title").click()
    _wait(page, lambda d: d.find_element(By.ID, "doc-text").text)
    assert page.find_element(By.ID, "doc-text").text == "The keeper relit the lamp at midnight."
    assert "team" in page.find_element(By.ID, "doc-meta").text and "doc=lamp" in page.current_url
    page.back()
    _wait(page, lambda d: d.find_elements(By.CSS_SELECTOR, ".hit") and d.find_element(By.ID, "doc").get_attribute("hidden"))
    assert page.current_url == url
    # a bookmark: the URL alone runs the search, the options included
    page.get(url.split("?")[0] + "?q=corrosion&mode=bm25&min=0.0001&filters=team%3Dred")
    _wait(page, lambda d: "(generation" in d.find_element(By.ID, "status").text)
    assert [h.find_element(By.CLASS_NAME, "id").text for h in page.find_elements(By.CSS_SELECTOR, ".hit")] == ["bridge-1"]
    assert "with relevance ≥ 0.0001" in page.find_element(By.ID, "status").text
    assert page.find_element(By.ID, "mode").get_attribute("value") == "bm25"


def test_a_hit_opens_its_document_at_the_cited_passage(page):
    """Issue 76: the document view opened at the top, not at the cited passage or page."""
    from selenium.webdriver.common.by import By

    page.get(page.current_url.split("?")[0])
    hits = _search(page, "who signed the ferry permit")
    top = next(h for h in hits if h.find_element(By.CLASS_NAME, "id").text == "long")
    marked = [m.text.lower() for m in top.find_elements(By.TAG_NAME, "mark")]
    assert "ferry" in marked and "who" not in marked          # a question word is not marked beside others
    top.find_element(By.CLASS_NAME, "title").click()
    _wait(page, lambda d: d.find_elements(By.ID, "cited"))
    cited = page.find_element(By.ID, "cited")
    assert "signed the ferry permit" in cited.text and "at=" in page.current_url
    box = page.execute_script("const r = document.getElementById('cited').getBoundingClientRect();"
                              "return [r.top, window.innerHeight, window.scrollY];")
    assert 0 <= box[0] < box[1] and box[2] > 0, box              # scrolled to it, in view
    page.back()


def test_the_api_docs_render_their_operations(page):
    """Issue 76: /docs rendered "Unable to render this definition" (the server writes OpenAPI
    3.1; the bundled Swagger UI read 3.0 only). The rendered page must list the operations, from
    files served by ldr itself (nothing from another host)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    home = page.current_url
    base = home.split("/?")[0].rstrip("/")
    if base.count("/") > 2:
        base = base[:base.index("/", base.index("//") + 2)]
    try:
        page.get(base + "/docs")
        WebDriverWait(page, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
                                      or "Unable to render" in d.page_source)
        assert "Unable to render" not in page.page_source
        paths = {e.text.replace("\u200b", "").strip() for e in page.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
        assert {"/search", "/health", "/info", "/documents"} <= paths, paths
        hosts = page.execute_script("return performance.getEntriesByType('resource').map(e => new URL(e.name).host)")
        assert set(hosts) <= {base.split("//", 1)[1]}, hosts
    finally:
        page.get(home)
