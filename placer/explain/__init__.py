"""Why a placement is what it is: plain-data explanations, comparisons with baselines, the rich terminal
view, the batch table and the SVG drawing."""
