// The real window on a real X server (Xvfb, started by ctest through xvfb-run at 1280x800 and at
// 1920x1080), filling the screen: on every page no label, button or table cell text is cut (its
// text fits its rectangle, measured with its font's metrics), chart titles are whole where they
// fit, and on the Plan page the days and cost columns are in view without scrolling. Each page is
// saved as a PNG beside the test.
#include <gtest/gtest.h>

#include <algorithm>

#include <QAbstractButton>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QDir>
#include <QLabel>
#include <QPushButton>
#include <QRadioButton>
#include <QScreen>
#include <QSignalSpy>
#include <QStyleOptionButton>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTextDocument>

#include "gui_test_support.h"
#include "item_models.h"
#include "main_window.h"
#include "page_common.h"

namespace capplan::gui {
namespace {

// The width the text needs and the width it has, for a label: plain text by its font's metrics,
// rich text laid out as a document; a wrapping label is cut when it needs more height than it has.
QString labelCut(const QLabel* l) {
  const QRect r = l->contentsRect();
  const QString text = l->text();
  if (text.isEmpty() || l->pixmap().isNull() == false) return {};
  if (l->wordWrap()) {
    const int need = l->heightForWidth(l->width());
    return need > l->height() + 1 ? QStringLiteral("needs %1 px of height, has %2").arg(need).arg(l->height()) : QString();
  }
  int need = 0;
  if (Qt::mightBeRichText(text) || l->textFormat() == Qt::RichText) {
    QTextDocument doc;
    doc.setDefaultFont(l->font());
    doc.setDocumentMargin(0);
    doc.setHtml(text);
    need = int(std::ceil(doc.idealWidth()));
  } else {
    for (const QString& line : text.split(QLatin1Char('\n'))) need = std::max(need, l->fontMetrics().horizontalAdvance(line));
  }
  return need > r.width() + 1 ? QStringLiteral("needs %1 px, has %2").arg(need).arg(r.width()) : QString();
}

// A button's text against the room its style gives the text (contents minus the indicator).
QString buttonCut(const QAbstractButton* b) {
  QString text = b->text();
  text.remove(QLatin1Char('&'));
  if (text.isEmpty()) return {};
  const int need = b->fontMetrics().horizontalAdvance(text);
  QStyleOptionButton opt;
  opt.initFrom(b);
  opt.text = b->text();
  int room = b->contentsRect().width();
  if (qobject_cast<const QCheckBox*>(b))
    room = b->style()->subElementRect(QStyle::SE_CheckBoxContents, &opt, b).width();
  else if (qobject_cast<const QRadioButton*>(b))
    room = b->style()->subElementRect(QStyle::SE_RadioButtonContents, &opt, b).width();
  else if (qobject_cast<const QPushButton*>(b))
    room = b->style()->subElementRect(QStyle::SE_PushButtonContents, &opt, b).width() -
           2 * b->style()->pixelMetric(QStyle::PM_ButtonMargin, &opt, b) / 2;
  return need > room + 1 ? QStringLiteral("needs %1 px, has %2").arg(need).arg(room) : QString();
}

TEST(GuiScreens, NoTextIsCutAndDaysAndCostAreInView) {
  test::ensureApp();
  const QString platform = QGuiApplication::platformName();
  if (platform != QLatin1String("xcb")) GTEST_SKIP() << "needs an X server (run under xvfb-run), platform " << platform.toStdString();
  const QSize screen = QGuiApplication::primaryScreen()->geometry().size();
  const QString tag = QStringLiteral("%1x%2").arg(screen.width()).arg(screen.height());
  QTemporaryDir dir;
  MainWindowOptions o;
  o.autosavePath = dir.filePath(QStringLiteral("autosave.yaml"));
  o.restoreAutosave = false;
  MainWindow w(o);
  w.move(0, 0);
  w.resize(screen);  // what a maximised window gets (Xvfb runs no window manager)
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  QSignalSpy planned(&w, &MainWindow::planUpdated);
  ASSERT_TRUE(planned.wait(120000)) << "no plan at start";
  // A comparison, so that the Compare page shows its table rather than its empty state.
  w.pinBaseline();
  QTableView* key = w.findChild<QTableView*>(QStringLiteral("candidateTable"));
  ASSERT_NE(key, nullptr);
  key->selectRow(1);
  ASSERT_TRUE(w.addToComparison());
  key->selectRow(0);
  QTest::qWait(300);  // charts, the what-if and the step simulation fill in
  EXPECT_EQ(w.size(), screen);

  const QString shots = QStringLiteral(CAPPLAN_BINARY_DIR "/tests/app/gui/screens-") + tag;
  const QStringList pages = {QStringLiteral("model"), QStringLiteral("cluster"), QStringLiteral("plan"),
                             QStringLiteral("timeline"), QStringLiteral("run"), QStringLiteral("compare")};
  QDir().mkpath(shots);
  for (int p = 0; p < MainWindow::kPageCount; ++p) {
    w.showPage(MainWindow::Page(p));
    QTest::qWait(150);
    SCOPED_TRACE(QStringLiteral("%1 page at %2").arg(pages[p], tag).toStdString());
    for (const QLabel* l : w.findChildren<QLabel*>()) {
      if (!l->isVisibleTo(&w) || !l->isVisible()) continue;
      const QString why = labelCut(l);
      EXPECT_TRUE(why.isEmpty()) << "label " << l->objectName().toStdString() << " '" << l->text().left(80).toStdString()
                                 << "': " << why.toStdString();
    }
    for (const QAbstractButton* b : w.findChildren<QAbstractButton*>()) {
      if (!b->isVisible()) continue;
      const QString why = buttonCut(b);
      EXPECT_TRUE(why.isEmpty()) << "button " << b->objectName().toStdString() << " '" << b->text().toStdString()
                                 << "': " << why.toStdString();
    }
    // Every cell of a table in view shows its whole text (the candidate table's layout column
    // aside: its tooltip lists every knob).
    for (const QTableWidget* t : w.findChildren<QTableWidget*>()) {
      if (!t->isVisible()) continue;
      const QFontMetrics fm(t->font());
      for (int r = 0; r < t->rowCount(); ++r)
        for (int c = 0; c < t->columnCount(); ++c) {
          const QTableWidgetItem* item = t->item(r, c);
          if (item == nullptr || t->isColumnHidden(c)) continue;
          int need = 0;
          for (const QString& line : item->text().split(QLatin1Char('\n')))
            need = std::max(need, fm.horizontalAdvance(line) + 8);  // the cell's margins
          EXPECT_LE(need, t->columnWidth(c) + 1)
              << "table " << t->objectName().toStdString() << " cell '" << item->text().toStdString() << "'";
        }
    }
    // A chart's title is whole wherever the chart is wide enough for it.
    for (const QChartView* v : w.findChildren<QChartView*>()) {
      if (!v->isVisible() || v->chart() == nullptr) continue;
      const QString full = chartFullTitle(v->chart());
      const int need = QFontMetrics(v->chart()->titleFont()).horizontalAdvance(full);
      if (!full.isEmpty() && need <= v->width() - 24) {
        EXPECT_EQ(v->chart()->title(), full) << "chart " << v->objectName().toStdString() << " is " << v->width() << " px wide";
      }
    }
    EXPECT_TRUE(w.grab().save(QStringLiteral("%1/%2-%3.png").arg(shots).arg(p + 1, 2, 10, QLatin1Char('0')).arg(pages[p])));
  }

  // Expectation: the step, days, cost, memory, fits and layout columns are in the key view, which
  // is inside the window and not scrolled.
  w.showPage(MainWindow::Page::Plan);
  QTest::qWait(100);
  ASSERT_GT(key->model()->rowCount(), 0);
  for (int c : {int(CandidateTableModel::StepTime), int(CandidateTableModel::Days), int(CandidateTableModel::Dollars),
                int(CandidateTableModel::MemoryGiB), int(CandidateTableModel::Fits)}) {
    const int x = key->columnViewportPosition(c);
    EXPECT_FALSE(key->isColumnHidden(c)) << c;
    EXPECT_GE(x, 0) << c;
    EXPECT_LE(x + key->columnWidth(c), key->viewport()->width()) << "column " << c << " cut";
    const QPoint right = key->viewport()->mapTo(&w, QPoint(x + key->columnWidth(c), 0));
    EXPECT_LE(right.x(), w.width()) << "column " << c << " beyond the window";
  }
  w.close();
}

}  // namespace
}  // namespace capplan::gui
