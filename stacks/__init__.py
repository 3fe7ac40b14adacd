"""AWS CDK stacks (one per deployable unit) and the AWS-side constructs they are made of."""
