def describe(plan):
    from pprint import pformat
    return pformat(plan, width=150)
