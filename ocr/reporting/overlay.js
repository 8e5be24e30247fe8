  // Shared by report.html and the serve page (inlined into each at this spot): outcome labels and the
  // SVG of a card's ground-truth boxes and detections, coloured by outcome.
  var SVG = "http://www.w3.org/2000/svg";
  var LABELS = { matched: "matched", split: "split", merged: "merged", missed: "missed",
                 false_positive: "false positive", ignored: "ignored", unlabelled: "prediction" };
  var pct = function (v) { return (100 * v).toFixed(1); };
  var el = function (tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  };
  var polygon = function (flat, cls, outcome, title) {
    var points = [];
    for (var i = 0; i < flat.length; i += 2) points.push(flat[i] + "," + flat[i + 1]);
    var p = document.createElementNS(SVG, "polygon");
    p.setAttribute("points", points.join(" "));
    p.setAttribute("class", cls + " " + outcome);
    p.setAttribute("data-outcome", outcome);
    p.style.stroke = "var(--" + outcome + ")";
    var t = document.createElementNS(SVG, "title");
    t.textContent = title;
    p.appendChild(t);
    return p;
  };
  var overlay = function (card) {
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 " + card.size[0] + " " + card.size[1]);
    svg.setAttribute("preserveAspectRatio", "none");
    (card.gt || []).forEach(function (flat, i) {
      svg.appendChild(polygon(flat, "gt", card.gt_outcome[i], "GT: " + LABELS[card.gt_outcome[i]]));
    });
    card.det.forEach(function (flat, i) {
      var label = "detection: " + LABELS[card.det_outcome[i]] + ", score " + card.scores[i];
      svg.appendChild(polygon(flat, "det", card.det_outcome[i], label));
    });
    return svg;
  };
