"""cdk8s constructs: the Kubernetes side (KubeRay values, the PD RayService) as typed objects.

Named k8s_constructs, not constructs: a top-level `constructs` package would shadow the `constructs`
library that aws-cdk-lib and cdk8s import themselves.
"""
